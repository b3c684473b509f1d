//! An OTLP/HTTP metrics request as OpenTelemetry's own generated classes read it (the Python
//! `opentelemetry-proto` package in the lab's venv, `cargo xtask setup`): in, a request body as
//! sent (gzip or not); out, the `ExportMetricsServiceRequest` as JSON in protobuf's canonical
//! mapping (`MessageToDict`: camelCase names, 64-bit integers as strings, bytes as base64). A body
//! these classes cannot parse is an error with their message.
use std::io::Read as _;
use std::process::Command;

use anyhow::{Context as _, bail};
use serde_json::Value;

use crate::guard::Scratch;

/// The venv `cargo xtask setup` fills.
const PYTHON: &str = "/var/cache/runqlat-tools/venv/bin/python3";

const DECODE: &str = r#"
import json, sys
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
request = ExportMetricsServiceRequest()
request.ParseFromString(open(sys.argv[1], "rb").read())
# Fields the classes do not know (a wrong tag or type) would be skipped by a receiver: refuse them.
unknown(request, "request")
print(json.dumps(MessageToDict(request)))
"#;

/// `body` decoded (gunzipped first when it starts with gzip's magic bytes).
pub fn decode(body: &[u8]) -> anyhow::Result<Value> {
    let raw = if body.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(body).read_to_end(&mut out).context("gunzip")?;
        out
    } else {
        body.to_vec()
    };
    let dir = Scratch::new("runqlat-otlp")?;
    let path = dir.path().join("request.pb");
    std::fs::write(&path, &raw).context("writing the request")?;
    let out = Command::new(PYTHON)
        .args(["-c", &format!("{}{DECODE}", super::REFUSE_UNKNOWN)])
        .arg(&path)
        .output()
        .with_context(|| format!("{PYTHON} (run `cargo xtask setup`)"))?;
    if !out.status.success() {
        bail!("opentelemetry-proto refused the request: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    serde_json::from_slice(&out.stdout).context("its JSON")
}

/// The request's metrics (all resources and scopes), by name.
pub fn metrics(request: &Value) -> Vec<&Value> {
    request["resourceMetrics"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["scopeMetrics"].as_array().into_iter().flatten())
        .flat_map(|s| s["metrics"].as_array().into_iter().flatten())
        .collect()
}

/// The resource's attributes of the first resource, as (key, string value).
pub fn resource(request: &Value) -> Vec<(String, String)> {
    request["resourceMetrics"][0]["resource"]["attributes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| {
            let v = &a["value"];
            let value = v["stringValue"].as_str().map_or_else(|| v.to_string(), str::to_owned);
            (a["key"].as_str().unwrap_or_default().to_owned(), value)
        })
        .collect()
}
