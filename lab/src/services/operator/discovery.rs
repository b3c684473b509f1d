//! What Prometheus's kubernetes_sd knows of a discovered pod: in, a `DiscoveredPod` and the role;
//! out, its `__meta_kubernetes_*` labels, named as service discovery names them.
use std::collections::BTreeMap;

use super::DiscoveredPod;

/// A label name as the operator and service discovery write it: every character outside
/// `[a-zA-Z0-9_]` becomes `_`.
pub fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

/// The `__meta_kubernetes_*` labels (and `__address__`) Prometheus's kubernetes_sd gives `pod`'s
/// port under the `endpoints` role (Service, Endpoints and pod meta labels) or the `pod` role.
pub fn meta_labels(pod: &DiscoveredPod, service_role: bool) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut set = |k: &str, v: &str| {
        m.insert(k.to_owned(), v.to_owned());
    };
    let ip = pod.address.rsplit_once(':').map_or(pod.address.as_str(), |(ip, _)| ip);
    let port = pod.address.rsplit_once(':').map_or("", |(_, port)| port);
    set("__address__", &pod.address);
    set("__meta_kubernetes_namespace", &pod.namespace);
    set("__meta_kubernetes_pod_name", &pod.pod);
    set("__meta_kubernetes_pod_ip", ip);
    set("__meta_kubernetes_pod_node_name", &pod.node);
    set("__meta_kubernetes_pod_host_ip", ip);
    set("__meta_kubernetes_pod_ready", "true");
    set("__meta_kubernetes_pod_phase", "Running");
    set("__meta_kubernetes_pod_uid", &format!("uid-{}", pod.pod));
    set("__meta_kubernetes_pod_controller_kind", "DaemonSet");
    set("__meta_kubernetes_pod_controller_name", &pod.service);
    set("__meta_kubernetes_pod_container_name", &pod.container);
    set("__meta_kubernetes_pod_container_init", "false");
    set("__meta_kubernetes_pod_container_port_name", &pod.port_name);
    set("__meta_kubernetes_pod_container_port_number", port);
    set("__meta_kubernetes_pod_container_port_protocol", "TCP");
    for (k, v) in &pod.pod_labels {
        set(&format!("__meta_kubernetes_pod_label_{}", sanitize(k)), v);
        set(&format!("__meta_kubernetes_pod_labelpresent_{}", sanitize(k)), "true");
    }
    if service_role {
        set("__meta_kubernetes_endpoints_name", &pod.service);
        set("__meta_kubernetes_endpoint_ready", "true");
        set("__meta_kubernetes_endpoint_node_name", &pod.node);
        set("__meta_kubernetes_endpoint_port_name", &pod.port_name);
        set("__meta_kubernetes_endpoint_port_protocol", "TCP");
        set("__meta_kubernetes_endpoint_address_target_kind", "Pod");
        set("__meta_kubernetes_endpoint_address_target_name", &pod.pod);
        set("__meta_kubernetes_service_name", &pod.service);
        for (k, v) in &pod.service_labels {
            set(&format!("__meta_kubernetes_service_label_{}", sanitize(k)), v);
            set(&format!("__meta_kubernetes_service_labelpresent_{}", sanitize(k)), "true");
            set(&format!("__meta_kubernetes_endpoints_label_{}", sanitize(k)), v);
            set(&format!("__meta_kubernetes_endpoints_labelpresent_{}", sanitize(k)), "true");
        }
    }
    m
}
