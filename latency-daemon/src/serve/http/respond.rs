//! One parsed request in, one framed response and its [`Outcome`] out: the method and body policy,
//! the handler call with panics contained, HEAD, and the Content-Type/Content-Length every reply carries.

use std::panic::{AssertUnwindSafe, catch_unwind};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, SizeHint};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Response, StatusCode};

use super::{Handler, Reply, Request};
use crate::metrics::instruments::http::Outcome;

pub(super) const TEXT: &str = "text/plain; charset=utf-8";

pub(super) fn respond<B: Body>(
    req: &hyper::Request<B>,
    handler: &dyn Handler,
    max_body_bytes: usize,
    authenticated: bool,
) -> (Response<Full<Bytes>>, Outcome) {
    let method = req.method();
    if method != Method::GET && method != Method::HEAD {
        let reply = Reply::new(StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET and HEAD are served\n")
            .with_header(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return (frame(reply, false), Outcome::BadMethod);
    }
    if !body_fits(&req.body().size_hint(), max_body_bytes) {
        // The body stays unread; closing is the only way to be sure it is never parsed as a request.
        let reply = Reply::new(StatusCode::PAYLOAD_TOO_LARGE, TEXT, "request bodies are not accepted\n")
            .with_header(header::CONNECTION, HeaderValue::from_static("close"));
        return (frame(reply, method == Method::HEAD), Outcome::TooLarge);
    }

    let request = Request {
        method,
        path: req.uri().path(),
        query: req.uri().query(),
        accept: req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok()),
        accept_encoding: req.headers().get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()),
        authenticated,
    };
    // AssertUnwindSafe: the handler only reads state it shares with the rest of the daemon through its
    // own synchronisation; nothing of ours is left half-updated by a panic, and the reply is discarded.
    let reply = match catch_unwind(AssertUnwindSafe(|| handler.handle(&request))) {
        Ok(reply) => reply,
        Err(_) => {
            let reply = Reply::new(StatusCode::INTERNAL_SERVER_ERROR, TEXT, "internal error\n");
            return (frame(reply, method == Method::HEAD), Outcome::Panicked);
        }
    };
    if HeaderValue::from_str(reply.content_type).is_err() {
        let reply = Reply::new(StatusCode::INTERNAL_SERVER_ERROR, TEXT, "internal error: bad content type\n");
        return (frame(reply, method == Method::HEAD), Outcome::HandlerError);
    }
    let outcome = match reply.status {
        StatusCode::NOT_FOUND => Outcome::NotFound,
        s if s.is_client_error() || s.is_server_error() => Outcome::HandlerError,
        _ => Outcome::Ok,
    };
    (frame(reply, method == Method::HEAD), outcome)
}

/// A body is refused unless its framing promises at most `max` bytes; chunked bodies promise nothing.
fn body_fits(hint: &SizeHint, max: usize) -> bool {
    let max = u64::try_from(max).unwrap_or(u64::MAX);
    hint.upper().is_some_and(|upper| upper <= max)
}

/// Sets the framing headers ourselves so they are present and right even for HEAD, where the body is
/// dropped but Content-Length still describes what GET would send (RFC 9110 §9.3.2).
pub(super) fn frame(reply: Reply, head: bool) -> Response<Full<Bytes>> {
    let content_type = HeaderValue::from_str(reply.content_type).unwrap_or_else(|_| HeaderValue::from_static(TEXT));
    let body = if head { Bytes::new() } else { reply.body.clone() };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = reply.status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(reply.body.len()));
    for (name, value) in reply.extra_headers {
        // Framing is ours: a handler-supplied length or encoding could desynchronise the connection.
        if name != header::CONTENT_LENGTH && name != header::TRANSFER_ENCODING && name != header::CONTENT_TYPE {
            headers.append(name, value);
        }
    }
    response
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::Empty;

    use super::*;

    /// Answers "/" with a fixed page, "/panic" by panicking, "/bad-type" with an unencodable type.
    #[derive(Debug, Default)]
    struct Fixture {
        calls: AtomicUsize,
        seen: Mutex<String>,
    }

    impl Handler for Fixture {
        fn handle(&self, req: &Request<'_>) -> Reply {
            self.calls.fetch_add(1, Ordering::Relaxed);
            match req.path {
                "/" => Reply::new(StatusCode::OK, "text/plain", "hello\n")
                    .with_header(header::HeaderName::from_static("x-fixture"), HeaderValue::from_static("1"))
                    .with_header(header::CONTENT_LENGTH, HeaderValue::from_static("999"))
                    .with_header(header::TRANSFER_ENCODING, HeaderValue::from_static("chunked")),
                "/echo" => {
                    *self.seen.lock().unwrap() =
                        format!("{} {:?} {:?} {}", req.method, req.query, req.accept, req.authenticated);
                    Reply::new(StatusCode::OK, "text/plain", "")
                }
                "/panic" => panic!("fixture panics on purpose"),
                "/bad-type" => Reply::new(StatusCode::OK, "text/plain\n", "x"),
                "/teapot" => Reply::new(StatusCode::IM_A_TEAPOT, "text/plain", "short and stout\n"),
                _ => Reply::new(StatusCode::NOT_FOUND, "text/plain", "no such page\n"),
            }
        }
    }

    fn request(method: Method, uri: &str) -> hyper::Request<Empty<Bytes>> {
        let mut req = hyper::Request::new(Empty::new());
        *req.method_mut() = method;
        *req.uri_mut() = uri.parse().unwrap();
        req
    }

    fn header<'a>(response: &'a Response<Full<Bytes>>, name: &str) -> &'a str {
        response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("<missing>")
    }

    fn body_len(response: &Response<Full<Bytes>>) -> Option<u64> {
        response.body().size_hint().exact()
    }

    #[test]
    fn get_frames_the_handler_reply() {
        let (response, outcome) = respond(&request(Method::GET, "/"), &Fixture::default(), 0, true);
        assert_eq!(outcome, Outcome::Ok);
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(header(&response, "content-type"), "text/plain");
        assert_eq!(header(&response, "content-length"), "6");
        assert_eq!(header(&response, "x-fixture"), "1");
        assert!(response.headers().get("transfer-encoding").is_none());
        assert_eq!(response.headers().get_all("content-length").iter().count(), 1);
        assert_eq!(body_len(&response), Some(6));
    }

    #[test]
    fn handler_sees_method_query_and_accept() {
        let mut req = request(Method::HEAD, "/echo?x=1");
        req.headers_mut().insert(header::ACCEPT, HeaderValue::from_static("text/plain"));
        let fixture = Fixture::default();
        respond(&req, &fixture, 0, true);
        let seen = fixture.seen.lock().unwrap().clone();
        assert_eq!(seen, r#"HEAD Some("x=1") Some("text/plain") true"#);
        respond(&req, &fixture, 0, false);
        let seen = fixture.seen.lock().unwrap().clone();
        assert_eq!(seen, r#"HEAD Some("x=1") Some("text/plain") false"#);
    }

    #[test]
    fn head_keeps_get_length_and_drops_the_body() {
        let (response, outcome) = respond(&request(Method::HEAD, "/"), &Fixture::default(), 0, true);
        assert_eq!(outcome, Outcome::Ok);
        assert_eq!(header(&response, "content-length"), "6");
        assert_eq!(header(&response, "content-type"), "text/plain");
        assert_eq!(body_len(&response), Some(0));
    }

    #[test]
    fn other_methods_are_405_without_calling_the_handler() {
        let fixture = Fixture::default();
        for method in [Method::POST, Method::PUT, Method::DELETE, Method::OPTIONS, Method::PATCH, Method::TRACE] {
            let (response, outcome) = respond(&request(method.clone(), "/"), &fixture, 0, true);
            assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED, "{method}");
            assert_eq!(header(&response, "allow"), "GET, HEAD");
            assert_eq!(outcome, Outcome::BadMethod);
        }
        assert_eq!(fixture.calls.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn bodies_over_the_limit_or_unbounded_are_413() {
        let cases = [
            (SizeHint::with_exact(0), 0, true),
            (SizeHint::with_exact(1), 0, false),
            (SizeHint::with_exact(10), 10, true),
            (SizeHint::with_exact(11), 10, false),
            (SizeHint::new(), 0, false), // chunked: no upper bound
            (SizeHint::new(), usize::MAX, false),
        ];
        for (hint, max, fits) in cases {
            assert_eq!(body_fits(&hint, max), fits, "{hint:?} max {max}");
        }
        let fixture = Fixture::default();
        let req = hyper::Request::new(Full::new(Bytes::from_static(b"payload")));
        let (response, outcome) = respond(&req, &fixture, 0, true);
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(header(&response, "connection"), "close");
        assert_eq!(outcome, Outcome::TooLarge);
        assert_eq!(fixture.calls.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn handler_statuses_are_classified() {
        let fixture = Fixture::default();
        let (response, outcome) = respond(&request(Method::GET, "/nope"), &fixture, 0, true);
        assert_eq!((response.status(), outcome), (StatusCode::NOT_FOUND, Outcome::NotFound));
        let (response, outcome) = respond(&request(Method::GET, "/teapot"), &fixture, 0, true);
        assert_eq!((response.status(), outcome), (StatusCode::IM_A_TEAPOT, Outcome::HandlerError));
    }

    #[test]
    fn a_panic_becomes_500() {
        let (response, outcome) = respond(&request(Method::GET, "/panic"), &Fixture::default(), 0, true);
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(outcome, Outcome::Panicked);
        assert_eq!(header(&response, "content-type"), TEXT);
    }

    #[test]
    fn an_unencodable_content_type_becomes_500() {
        let (response, outcome) = respond(&request(Method::GET, "/bad-type"), &Fixture::default(), 0, true);
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(outcome, Outcome::HandlerError);
    }
}
