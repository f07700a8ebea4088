//! The request head parser against a table of accepted and refused heads,
//! each also fed in two pieces at every offset, plus detailed checks of the
//! spans and flags of accepted heads.

use rush_proto::{
    parse_request_head, BodyFraming, HeadStatus, HeaderSpan, Limits, Method, ProtoError,
    RequestHead, Span, Version,
};

type Outcome = Result<HeadStatus, ProtoError>;

fn parse_with(input: &[u8], limits: &Limits) -> (Outcome, Vec<HeaderSpan>) {
    let mut headers = Vec::new();
    let outcome = parse_request_head(input, limits, &mut headers);
    (outcome, headers)
}

fn parse(input: &[u8]) -> Outcome {
    parse_with(input, &Limits::default()).0
}

fn complete(input: &[u8]) -> (RequestHead, Vec<HeaderSpan>) {
    match parse_with(input, &Limits::default()) {
        (Ok(HeadStatus::Complete(head)), headers) => (head, headers),
        (other, _) => panic!("{:?}: expected a complete head, got {other:?}", show(input)),
    }
}

fn show(input: &[u8]) -> String {
    let text = String::from_utf8_lossy(input);
    if text.len() > 120 {
        format!("{}... ({} bytes)", &text[..120], input.len())
    } else {
        format!("{text:?}")
    }
}

/// What a table row expects from parsing its whole input.
#[derive(Debug, Clone)]
enum Expected {
    Accept {
        framing: BodyFraming,
        keep_alive: bool,
    },
    Refuse(ProtoError),
}

#[derive(Debug, Clone)]
struct Case {
    input: Vec<u8>,
    limits: Limits,
    expected: Expected,
}

impl Case {
    fn with_limits(mut self, limits: Limits) -> Case {
        self.limits = limits;
        self
    }
}

fn accept(input: impl AsRef<[u8]>, framing: BodyFraming, keep_alive: bool) -> Case {
    Case {
        input: input.as_ref().to_vec(),
        limits: Limits::default(),
        expected: Expected::Accept {
            framing,
            keep_alive,
        },
    }
}

/// An HTTP/1.1 head without a body that keeps the connection open.
fn plain(input: impl AsRef<[u8]>) -> Case {
    accept(input, BodyFraming::Empty, true)
}

fn refuse(input: impl AsRef<[u8]>, error: ProtoError) -> Case {
    Case {
        input: input.as_ref().to_vec(),
        limits: Limits::default(),
        expected: Expected::Refuse(error),
    }
}

fn bad(input: impl AsRef<[u8]>, message: &'static str) -> Case {
    refuse(input, ProtoError::BadRequest(message))
}

/// `GET / HTTP/1.1`, a Host field, then `fields` (each ending in CRLF) and the empty line.
fn get_with(fields: &str) -> Vec<u8> {
    format!("GET / HTTP/1.1\r\nHost: example.com\r\n{fields}\r\n").into_bytes()
}

fn post_with(fields: &str, body: &str) -> Vec<u8> {
    format!("POST /upload HTTP/1.1\r\nHost: example.com\r\n{fields}\r\n{body}").into_bytes()
}

fn small_limits() -> Limits {
    Limits {
        max_request_line: 32,
        max_head_size: 96,
        max_headers: 4,
        max_body_size: 100,
        ..Limits::default()
    }
}

fn table() -> Vec<Case> {
    use BodyFraming::{Chunked, ContentLength, Empty};
    use ProtoError::{
        HeadersTooLarge, MethodNotAllowed, NotImplemented, PayloadTooLarge, UriTooLong,
        VersionNotSupported,
    };
    let long_value = "a".repeat(70);
    vec![
        // ---- accepted heads ----
        plain("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"),
        plain("GET /index.html?x=1&y=2 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n"),
        plain(get_with(
            "User-Agent: test\r\nAccept-Encoding: gzip, br\r\n",
        )),
        accept("GET / HTTP/1.0\r\n\r\n", Empty, false),
        accept("GET / HTTP/1.0\r\nHost: a\r\n\r\n", Empty, false),
        accept(
            "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            Empty,
            true,
        ),
        accept(
            "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n",
            Empty,
            true,
        ),
        accept(
            "GET / HTTP/1.0\r\nConnection: foo , keep-alive\r\n\r\n",
            Empty,
            true,
        ),
        accept(
            "GET / HTTP/1.0\r\nConnection: foo\r\nConnection: keep-alive\r\n\r\n",
            Empty,
            true,
        ),
        accept(
            "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n",
            Empty,
            false,
        ),
        accept(
            "GET / HTTP/1.0\r\nConnection: keep-alives\r\n\r\n",
            Empty,
            false,
        ),
        accept(get_with("Connection: close\r\n"), Empty, false),
        accept(get_with("Connection: CLOSE\r\n"), Empty, false),
        accept(get_with("Connection: keep-alive,close\r\n"), Empty, false),
        accept(
            get_with("Connection: upgrade\r\nConnection: \tclose \r\n"),
            Empty,
            false,
        ),
        accept(get_with("Connection: closed\r\n"), Empty, true),
        accept(get_with("Connection: upgrade, keep-alive\r\n"), Empty, true),
        plain(get_with("Connection:\r\n")),
        // Leading empty lines (up to MAX_LEADING_EMPTY_LINES).
        plain("\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain(format!(
            "{}GET / HTTP/1.1\r\nHost: a\r\n\r\n",
            "\r\n".repeat(8)
        )),
        // Field values httparse and rush accept.
        plain(get_with("X-Empty:\r\n")),
        plain(get_with("X-Spaces:   \r\n")),
        plain(get_with("X-Tab: a\tb\r\n")),
        plain(get_with("X-Obs-Text: caf\u{e9} \u{2603}\r\n")),
        plain(get_with(
            "X-Symbols: !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\r\n",
        )),
        plain(get_with(&format!("X-Long: {long_value}\r\n"))),
        plain(get_with(
            "x-lower: 1\r\nX-UPPER: 2\r\n!#$%&'*+-.^_`|~09: 3\r\n",
        )),
        // Method tokens and request targets.
        plain("PURGE /cache HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain("get / HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain("OPTIONS / HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain("GET http://example.com/a?b HTTP/1.1\r\nHost: example.com\r\n\r\n"),
        plain("GET HTTP://Example.COM:8080 HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain("GET hTTpS://[::1]:443/a?b HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain("GET http://127.0.0.1:65535?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain("GET http://a_b~c-d.%41!$&'()*+,;=/ HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain("OPTIONS http://example.com HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain("DELETE //a//b/?/?:@ HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain("GET /a?b=http://c HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain("GET /%20?%3F=%26 HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain("GET / HTTP/1.1\r\nHost:\r\n\r\n"),
        // Content-Length.
        accept(
            post_with("Content-Length: 5\r\n", "hello"),
            ContentLength(5),
            true,
        ),
        accept(post_with("Content-Length: 0\r\n", ""), Empty, true),
        accept(post_with("Content-Length: 000\r\n", ""), Empty, true),
        accept(
            post_with("Content-Length: 007\r\n", "1234567"),
            ContentLength(7),
            true,
        ),
        accept(
            post_with("Content-Length:  5 \r\n", "hello"),
            ContentLength(5),
            true,
        ),
        accept(
            post_with("Content-Length:\t5\t\r\n", "hello"),
            ContentLength(5),
            true,
        ),
        accept(
            post_with("Content-Length: 16777216\r\n", ""),
            ContentLength(16 * 1024 * 1024),
            true,
        ),
        accept(
            "POST / HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello",
            ContentLength(5),
            false,
        ),
        // Transfer-Encoding.
        accept(
            post_with("Transfer-Encoding: chunked\r\n", "0\r\n\r\n"),
            Chunked,
            true,
        ),
        accept(
            post_with("Transfer-Encoding: Chunked\r\n", ""),
            Chunked,
            true,
        ),
        accept(
            post_with("transfer-encoding: CHUNKED\r\n", ""),
            Chunked,
            true,
        ),
        accept(
            post_with("Transfer-Encoding:   chunked  \r\n", ""),
            Chunked,
            true,
        ),
        accept(
            post_with("Transfer-Encoding:\tchunked\r\n", ""),
            Chunked,
            true,
        ),
        accept(
            post_with("Transfer-Encoding: chunked\r\nConnection: close\r\n", ""),
            Chunked,
            false,
        ),
        // Body data after the head (a pipelined request, or a body) is not part of it.
        plain("GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n"),
        plain("GET / HTTP/1.1\r\nHost: a\r\n\r\nthis is not a request"),
        // Exactly at the limits.
        plain("GET /aaaaaaaaaaaaaaaaaa HTTP/1.1\r\nHost: a\r\n\r\n").with_limits(small_limits()),
        plain("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n")
            .with_limits(small_limits()),
        plain(format!(
            "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n",
            "v".repeat(64)
        ))
        .with_limits(small_limits()),
        accept(
            post_with("Content-Length: 100\r\n", ""),
            ContentLength(100),
            true,
        )
        .with_limits(Limits {
            max_body_size: 100,
            ..Limits::default()
        }),
        // ---- versions ----
        refuse("GET / HTTP/2.0\r\nHost: a\r\n\r\n", VersionNotSupported),
        refuse("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", VersionNotSupported),
        refuse("GET / HTTP/3.0\r\n\r\n", VersionNotSupported),
        refuse("GET / HTTP/0.9\r\n\r\n", VersionNotSupported),
        refuse("GET / HTTP/9.9\r\n\r\n", VersionNotSupported),
        refuse("GET / HTTP/1.2\r\nHost: a\r\n\r\n", VersionNotSupported),
        refuse("GET / HTTP/1.9\r\nHost: a\r\n\r\n", VersionNotSupported),
        bad("GET / HTTP/2\r\n\r\n", "invalid HTTP version"),
        bad("GET / HTTP/1\r\n\r\n", "invalid HTTP version"),
        bad("GET / HTTP/11\r\n\r\n", "invalid HTTP version"),
        bad("GET / HTTP/2.0x\r\n\r\n", "invalid HTTP version"),
        bad("GET / HTTP/20.0\r\n\r\n", "invalid HTTP version"),
        bad("GET / http/1.1\r\n\r\n", "invalid HTTP version"),
        bad("GET / HTTPS/1.1\r\n\r\n", "invalid HTTP version"),
        bad("GET / HTTP/1.x\r\n\r\n", "invalid HTTP version"),
        bad("GET / \r\n\r\n", "invalid HTTP version"),
        bad("GET /  HTTP/1.1\r\nHost: a\r\n\r\n", "invalid HTTP version"),
        bad("GET / HTTP/1.10\r\nHost: a\r\n\r\n", "invalid request line"),
        bad("GET / HTTP/1.1 \r\nHost: a\r\n\r\n", "invalid request line"),
        bad("GET / HTTP/1.1x\r\nHost: a\r\n\r\n", "invalid request line"),
        // ---- request line ----
        bad("GET /\r\n\r\n", "invalid request target"),
        bad(
            "GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid HTTP version",
        ),
        bad(
            "GET /a\x01b HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            "GET /a\x7fb HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            b"GET /\xff HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad("GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", "invalid method"),
        bad(" GET / HTTP/1.1\r\nHost: a\r\n\r\n", "invalid method"),
        bad("G(T / HTTP/1.1\r\nHost: a\r\n\r\n", "invalid method"),
        bad("G\u{e9}T / HTTP/1.1\r\nHost: a\r\n\r\n", "invalid method"),
        // ---- request targets ----
        // Fragments: the request-target grammar has none.
        bad(
            "GET /a?page=1#top HTTP/1.1\r\nHost: a\r\n\r\n",
            "fragment in request target",
        ),
        bad(
            "GET /# HTTP/1.1\r\nHost: a\r\n\r\n",
            "fragment in request target",
        ),
        bad(
            "GET http://example.com/a#b HTTP/1.1\r\nHost: a\r\n\r\n",
            "fragment in request target",
        ),
        bad(
            "OPTIONS *# HTTP/1.1\r\nHost: a\r\n\r\n",
            "fragment in request target",
        ),
        // Raw bytes outside visible ASCII: percent-encode them.
        bad(
            "GET /caf\u{e9}#frag HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            "GET /?q=\u{2603} HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            "GET http://b\u{fc}cher.example/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            b"GET /\x80 HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            b"GET /a\x00b HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            b"GET /a\x1fb HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            b"GET /a\tb HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        // Neither origin-form nor a usable absolute-form.
        bad(
            "GET foo/bar HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            "GET ?only HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            "GET a HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            "GET :80 HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            "GET s://]ufd/admin HTTP/1.1\r\nHost: a\r\n\r\n",
            "absolute-form request target must use http or https",
        ),
        bad(
            "GET ftp://example.com/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "absolute-form request target must use http or https",
        ),
        bad(
            "GET httpx://example.com/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "absolute-form request target must use http or https",
        ),
        bad(
            "GET http:/a HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http:a HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http:// HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http:///a HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http://user@example.com/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http://example.com:80@evil.example/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http://example.com:65536/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http://example.com:123456/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http://example.com:/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http://example.com:8x/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http://[::1/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http://[::1]x/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http://[fe80::1%25eth0]/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http://exa%zzmple/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        bad(
            "GET http://a\"b/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid authority in request target",
        ),
        // Asterisk-form is for OPTIONS, authority-form for CONNECT.
        bad(
            "GET * HTTP/1.1\r\nHost: a\r\n\r\n",
            "asterisk-form request target is only allowed with OPTIONS",
        ),
        bad(
            "options * HTTP/1.1\r\nHost: a\r\n\r\n",
            "asterisk-form request target is only allowed with OPTIONS",
        ),
        bad(
            "OPTIONS */a HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad(
            "GET example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n",
            "authority-form request target is only allowed with CONNECT",
        ),
        bad(
            "connect example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n",
            "authority-form request target is only allowed with CONNECT",
        ),
        // CONNECT: 405 when well-formed (rush is not a proxy), 400 otherwise.
        refuse(
            "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
            MethodNotAllowed("CONNECT is not supported: this server is not a proxy"),
        ),
        refuse(
            "CONNECT [::1]:8443 HTTP/1.0\r\n\r\n",
            MethodNotAllowed("CONNECT is not supported: this server is not a proxy"),
        ),
        bad(
            "CONNECT example.com HTTP/1.1\r\nHost: a\r\n\r\n",
            "CONNECT needs an authority-form request target (host:port)",
        ),
        bad(
            "CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n",
            "CONNECT needs an authority-form request target (host:port)",
        ),
        bad(
            "CONNECT * HTTP/1.1\r\nHost: a\r\n\r\n",
            "CONNECT needs an authority-form request target (host:port)",
        ),
        bad(
            "CONNECT http://example.com:443/ HTTP/1.1\r\nHost: a\r\n\r\n",
            "CONNECT needs an authority-form request target (host:port)",
        ),
        bad(
            "CONNECT user@example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n",
            "CONNECT needs an authority-form request target (host:port)",
        ),
        bad(
            "CONNECT example.com:65536 HTTP/1.1\r\nHost: a\r\n\r\n",
            "CONNECT needs an authority-form request target (host:port)",
        ),
        // A CONNECT that breaks other rules gets their 400, not the 405.
        bad(
            "CONNECT example.com:443 HTTP/1.1\r\n\r\n",
            "missing Host header",
        ),
        bad(
            "CONNECT example.com:443 HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\n",
            "more than one Content-Length value",
        ),
        // The Host field is still required with an absolute-form target.
        bad(
            "GET http://example.com/ HTTP/1.1\r\n\r\n",
            "missing Host header",
        ),
        bad(
            "GET http://example.com/ HTTP/1.1\r\nHost: a b\r\n\r\n",
            "invalid Host header",
        ),
        // ---- line endings ----
        bad("GET / HTTP/1.1\rHost: a\r\n\r\n", "bare CR"),
        bad("GET / HTTP/1.1\r\nHost: a\rX: b\r\n\r\n", "bare CR"),
        bad("GET / HTTP/1.1\r\nHost: a\r\nX:\rb\r\n\r\n", "bare CR"),
        bad("GET / HTTP/1.1\r\nHost: a\r\n\rX", "bare CR"),
        bad("GET / HTTP/1.1\r\nHost: a\r\n\r\r\n", "bare CR"),
        bad(
            "GET /a\rb HTTP/1.1\r\nHost: a\r\n\r\n",
            "invalid request target",
        ),
        bad("\rGET / HTTP/1.1\r\nHost: a\r\n\r\n", "bare CR"),
        bad("\r\n\rGET / HTTP/1.1\r\nHost: a\r\n\r\n", "bare CR"),
        bad("GET / HTTP/1.1\nHost: a\r\n\r\n", "bare LF"),
        bad("GET / HTTP/1.1\r\nHost: a\nX: b\r\n\r\n", "bare LF"),
        bad("GET / HTTP/1.1\r\nHost: a\n\r\n", "bare LF"),
        bad("GET / HTTP/1.1\r\nHost: a\r\n\n", "bare LF"),
        bad("GET / HTTP/1.1\nHost: a\n\n", "bare LF"),
        bad("GET / HTTP/1.0\n\n", "bare LF"),
        bad("GET / HTTP/1.0\r\n\n", "bare LF"),
        bad("\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", "bare LF"),
        bad(
            format!("{}GET / HTTP/1.1\r\nHost: a\r\n\r\n", "\r\n".repeat(9)),
            "too many empty lines before the request line",
        ),
        // ---- field syntax ----
        bad(
            get_with("Content-Length : 5\r\n"),
            "whitespace in header field name",
        ),
        bad(
            get_with("X-Test\t: 5\r\n"),
            "whitespace in header field name",
        ),
        bad(get_with("X Test: 5\r\n"), "whitespace in header field name"),
        bad(
            get_with("X-Folded: a\r\n b\r\n"),
            "whitespace at start of header line (obsolete line folding)",
        ),
        bad(
            get_with("X-Folded: a\r\n\tb\r\n"),
            "whitespace at start of header line (obsolete line folding)",
        ),
        bad(
            "GET / HTTP/1.1\r\n Host: a\r\n\r\n",
            "whitespace at start of header line (obsolete line folding)",
        ),
        bad(get_with(": empty name\r\n"), "invalid header name"),
        bad(get_with("X(: 1\r\n"), "invalid header name"),
        bad(get_with("X/Y: 1\r\n"), "invalid header name"),
        bad(get_with("X\u{e9}: 1\r\n"), "invalid header name"),
        bad(get_with("X\0: 1\r\n"), "invalid header name"),
        bad(get_with("NoColon\r\n"), "header field without colon"),
        bad(
            get_with("X: a\x01b\r\n"),
            "invalid character in header value",
        ),
        bad(
            get_with("X: a\x00b\r\n"),
            "invalid character in header value",
        ),
        bad(
            get_with("X: a\x7fb\r\n"),
            "invalid character in header value",
        ),
        bad(
            get_with("X: a\x0bb\r\n"),
            "invalid character in header value",
        ),
        bad(
            get_with("X: a\x1b[31m\r\n"),
            "invalid character in header value",
        ),
        bad(get_with("X: \x7f\r\n"), "invalid character in header value"),
        bad(
            get_with(&format!("X: {long_value}\x7f{long_value}\r\n")),
            "invalid character in header value",
        ),
        bad(
            get_with(&format!("X: {long_value}\x01{long_value}\r\n")),
            "invalid character in header value",
        ),
        // ---- Host ----
        bad("GET / HTTP/1.1\r\n\r\n", "missing Host header"),
        bad(
            "GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
            "multiple Host headers",
        ),
        bad(
            "GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n",
            "multiple Host headers",
        ),
        bad(
            "GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n",
            "multiple Host headers",
        ),
        // ---- Content-Length (request smuggling classics) ----
        bad(
            post_with("Content-Length: 5\r\nContent-Length: 6\r\n", "hello"),
            "more than one Content-Length field",
        ),
        bad(
            post_with("Content-Length: 5, 6\r\n", "hello"),
            "more than one Content-Length value",
        ),
        bad(
            post_with("Content-Length: 5\r\nContent-Length: 5, 6\r\n", "hello"),
            "more than one Content-Length value",
        ),
        // Equal values are refused too (RFC 9110 8.6 would allow them).
        bad(
            post_with("Content-Length: 5, 5\r\n", "hello"),
            "more than one Content-Length value",
        ),
        bad(
            post_with("Content-Length: 5,5 , 5\r\n", "hello"),
            "more than one Content-Length value",
        ),
        bad(
            post_with("Content-Length: 5\r\ncontent-length: 5\r\n", "hello"),
            "more than one Content-Length field",
        ),
        bad(
            post_with("Content-Length: 0\r\nX: y\r\nContent-Length: 0\r\n", ""),
            "more than one Content-Length field",
        ),
        bad(
            post_with("Content-Length: 5\r\nContent-Length: x\r\n", "hello"),
            "invalid Content-Length",
        ),
        bad(
            post_with("Content-Length: +5\r\n", "hello"),
            "invalid Content-Length",
        ),
        bad(
            post_with("Content-Length: -1\r\n", ""),
            "invalid Content-Length",
        ),
        bad(
            post_with("Content-Length: 0x5\r\n", "hello"),
            "invalid Content-Length",
        ),
        bad(
            post_with("Content-Length: 5a\r\n", "hello"),
            "invalid Content-Length",
        ),
        bad(
            post_with("Content-Length: 5.0\r\n", "hello"),
            "invalid Content-Length",
        ),
        bad(
            post_with("Content-Length: 1 2\r\n", ""),
            "invalid Content-Length",
        ),
        bad(
            post_with("Content-Length:\r\n", ""),
            "invalid Content-Length",
        ),
        bad(
            post_with("Content-Length: 5,\r\n", "hello"),
            "more than one Content-Length value",
        ),
        bad(
            post_with("Content-Length: ,5\r\n", "hello"),
            "more than one Content-Length value",
        ),
        bad(
            post_with("Content-Length: 18446744073709551616\r\n", ""),
            "invalid Content-Length",
        ),
        bad(
            post_with("Content-Length: 99999999999999999999999\r\n", ""),
            "invalid Content-Length",
        ),
        refuse(
            post_with("Content-Length: 16777217\r\n", ""),
            PayloadTooLarge,
        ),
        refuse(
            post_with("Content-Length: 18446744073709551615\r\n", ""),
            PayloadTooLarge,
        ),
        // ---- Content-Length and Transfer-Encoding together ----
        bad(
            post_with(
                "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
                "0\r\n\r\n",
            ),
            "both Content-Length and Transfer-Encoding",
        ),
        bad(
            post_with(
                "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                "0\r\n\r\n",
            ),
            "both Content-Length and Transfer-Encoding",
        ),
        bad(
            post_with(
                "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n",
                "0\r\n\r\n",
            ),
            "both Content-Length and Transfer-Encoding",
        ),
        bad(
            post_with("Content-Length: 5\r\nTransfer-Encoding: xchunked\r\n", ""),
            "both Content-Length and Transfer-Encoding",
        ),
        // ---- Transfer-Encoding ----
        bad(
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "Transfer-Encoding in an HTTP/1.0 request",
        ),
        refuse(
            post_with("Transfer-Encoding: xchunked\r\n", ""),
            NotImplemented("unsupported transfer coding"),
        ),
        refuse(
            post_with("Transfer-Encoding: identity\r\n", ""),
            NotImplemented("unsupported transfer coding"),
        ),
        refuse(
            post_with("Transfer-Encoding: chunked;ext=1\r\n", ""),
            NotImplemented("unsupported transfer coding"),
        ),
        refuse(
            post_with("Transfer-Encoding: \"chunked\"\r\n", ""),
            NotImplemented("unsupported transfer coding"),
        ),
        refuse(
            post_with("Transfer-Encoding: foo, chunked\r\n", ""),
            NotImplemented("unsupported transfer coding"),
        ),
        bad(
            post_with("Transfer-Encoding: chunked, identity\r\n", ""),
            "chunked must be the final transfer coding",
        ),
        bad(
            post_with("Transfer-Encoding: chunked, gzip\r\n", ""),
            "chunked must be the final transfer coding",
        ),
        bad(
            post_with(
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
                "",
            ),
            "chunked must be the final transfer coding",
        ),
        bad(
            post_with("Transfer-Encoding: gzip\r\n", ""),
            "chunked must be the final transfer coding",
        ),
        bad(
            post_with("Transfer-Encoding: chunked, chunked\r\n", ""),
            "chunked applied more than once",
        ),
        bad(
            post_with(
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: Chunked\r\n",
                "",
            ),
            "chunked applied more than once",
        ),
        bad(
            post_with("Transfer-Encoding: chunked,\r\n", ""),
            "empty transfer coding",
        ),
        bad(
            post_with("Transfer-Encoding: , chunked\r\n", ""),
            "empty transfer coding",
        ),
        bad(
            post_with("Transfer-Encoding:\r\n", ""),
            "empty transfer coding",
        ),
        refuse(
            post_with("Transfer-Encoding: gzip, chunked\r\n", ""),
            NotImplemented("compressed transfer codings are not supported"),
        ),
        refuse(
            post_with(
                "Transfer-Encoding: x-gzip\r\nTransfer-Encoding: chunked\r\n",
                "",
            ),
            NotImplemented("compressed transfer codings are not supported"),
        ),
        refuse(
            post_with(
                "Transfer-Encoding: deflate, compress ,x-compress,\tchunked\r\n",
                "",
            ),
            NotImplemented("compressed transfer codings are not supported"),
        ),
        // ---- limits ----
        refuse(
            "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n",
            HeadersTooLarge,
        )
        .with_limits(small_limits()),
        refuse(
            "GET /aaaaaaaaaaaaaaaaaaa HTTP/1.1\r\nHost: a\r\n\r\n",
            UriTooLong,
        )
        .with_limits(small_limits()),
        // Incomplete, but already too long.
        refuse("GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", UriTooLong).with_limits(small_limits()),
        // A syntax error inside the limit is reported as such...
        bad(
            "GET /aaaa\x01aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "invalid request target",
        )
        .with_limits(small_limits()),
        // ...but past the limit, the limit is what counts.
        refuse("GET /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\x01", UriTooLong)
            .with_limits(small_limits()),
        refuse(
            format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "v".repeat(65)),
            HeadersTooLarge,
        )
        .with_limits(small_limits()),
        refuse(
            format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}", "v".repeat(100)),
            HeadersTooLarge,
        )
        .with_limits(small_limits()),
        refuse(
            format!("GET / HTTP/1.1\r\nHost: a\r\n{}", "X: 1\r\n".repeat(20)),
            HeadersTooLarge,
        )
        .with_limits(small_limits()),
        refuse(post_with("Content-Length: 101\r\n", ""), PayloadTooLarge).with_limits(Limits {
            max_body_size: 100,
            ..Limits::default()
        }),
    ]
}

fn check(case: &Case, outcome: &Outcome) {
    match (&case.expected, outcome) {
        (
            Expected::Accept {
                framing,
                keep_alive,
            },
            Ok(HeadStatus::Complete(head)),
        ) => {
            assert_eq!(head.framing, *framing, "framing of {}", show(&case.input));
            assert_eq!(
                head.keep_alive,
                *keep_alive,
                "keep_alive of {}",
                show(&case.input)
            );
        }
        (Expected::Refuse(error), Err(actual)) => {
            assert_eq!(actual, error, "refusal of {}", show(&case.input));
        }
        (expected, actual) => panic!(
            "{}: expected {expected:?}, got {actual:?}",
            show(&case.input)
        ),
    }
}

#[test]
fn table_of_whole_inputs() {
    for case in table() {
        let (outcome, _) = parse_with(&case.input, &case.limits);
        check(&case, &outcome);
    }
}

/// Every prefix of an input gives `Partial` or the input's own final answer,
/// and once a prefix gives the final answer every longer prefix does too.
/// For an accepted head, exactly the prefixes shorter than the head are partial.
#[test]
fn every_prefix_agrees_with_the_whole_input() {
    for case in table() {
        let (whole, whole_headers) = parse_with(&case.input, &case.limits);
        let mut decided = false;
        for end in 0..=case.input.len() {
            let (prefix, prefix_headers) = parse_with(&case.input[..end], &case.limits);
            let context = || {
                format!(
                    "{} cut at {end}: {prefix:?} vs {whole:?}",
                    show(&case.input)
                )
            };
            match (&whole, &prefix) {
                (Ok(HeadStatus::Complete(head)), Ok(HeadStatus::Partial)) => {
                    assert!(end < head.head_len, "{}", context());
                }
                (Ok(HeadStatus::Complete(head)), Ok(HeadStatus::Complete(prefix_head))) => {
                    assert!(end >= head.head_len, "{}", context());
                    assert_eq!(prefix_head, head, "{}", context());
                    assert_eq!(prefix_headers, whole_headers, "{}", context());
                }
                (Err(_), Ok(HeadStatus::Partial)) => {
                    assert!(!decided, "partial after an error: {}", context());
                }
                (Err(error), Err(prefix_error)) => {
                    assert_eq!(prefix_error, error, "{}", context());
                    decided = true;
                }
                _ => panic!("{}", context()),
            }
        }
    }
}

/// The same input arriving in two reads, as a server sees it: the second
/// parse runs on the first piece plus the second.
#[test]
fn two_reads_give_the_same_result_as_one() {
    for case in table() {
        let (whole, _) = parse_with(&case.input, &case.limits);
        for split in 0..=case.input.len() {
            let (first, _) = parse_with(&case.input[..split], &case.limits);
            let final_outcome = match first {
                Ok(HeadStatus::Partial) => parse_with(&case.input, &case.limits).0,
                decided => decided,
            };
            assert_eq!(
                final_outcome,
                whole,
                "{} split at {split}",
                show(&case.input)
            );
        }
    }
}

#[test]
fn empty_and_tiny_inputs_are_partial() {
    for input in [
        &b""[..],
        b"\r",
        b"\r\n",
        b"\r\n\r",
        b"G",
        b"GET",
        b"GET ",
        b"GET /",
        b"GET / ",
    ] {
        assert_eq!(parse(input), Ok(HeadStatus::Partial), "{input:?}");
    }
}

#[test]
fn spans_of_a_simple_head() {
    let input = b"GET /a/b?x=1&y=%20 HTTP/1.1\r\nHost: example.com:8080\r\nX-Empty:\r\nAccept:  text/html \r\n\r\n";
    let (head, headers) = complete(input);
    assert_eq!(head.method, Method::Get);
    assert_eq!(head.method_span.of(input), b"GET");
    assert_eq!(head.target.of(input), b"/a/b?x=1&y=%20");
    assert_eq!(head.path.of(input), b"/a/b");
    assert_eq!(
        head.query.map(|query| query.of(input)),
        Some(&b"x=1&y=%20"[..])
    );
    assert_eq!(head.version, Version::Http11);
    assert_eq!(head.head_len, input.len());
    assert_eq!(head.framing, BodyFraming::Empty);
    assert!(head.keep_alive);
    assert!(!head.expect_continue);
    assert_eq!(
        head.host.map(|host| host.of(input)),
        Some(&b"example.com:8080"[..])
    );

    let fields: Vec<(&[u8], &[u8])> = headers
        .iter()
        .map(|field| (field.name.of(input), field.value.of(input)))
        .collect();
    assert_eq!(
        fields,
        [
            (&b"Host"[..], &b"example.com:8080"[..]),
            (b"X-Empty", b""),
            (b"Accept", b"text/html"),
        ]
    );
    assert!(headers[1].value.is_empty());
}

#[test]
fn query_edge_cases() {
    let input = b"GET /p? HTTP/1.1\r\nHost: a\r\n\r\n";
    let (head, _) = complete(input);
    assert_eq!(head.path.of(input), b"/p");
    assert_eq!(head.query, Some(Span::new(7, 7)));

    let input = b"GET /p?a?b HTTP/1.1\r\nHost: a\r\n\r\n";
    let (head, _) = complete(input);
    assert_eq!(head.path.of(input), b"/p");
    assert_eq!(head.query.unwrap().of(input), b"a?b");

    let input = b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n";
    let (head, _) = complete(input);
    assert_eq!(head.method, Method::Options);
    assert_eq!(head.path.of(input), b"*");
    assert_eq!(head.query, None);
}

#[test]
fn spans_skip_leading_empty_lines() {
    let input = b"\r\n\r\nPOST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc";
    let (head, headers) = complete(input);
    assert_eq!(head.method, Method::Post);
    assert_eq!(head.method_span, Span::new(4, 8));
    assert_eq!(head.target.of(input), b"/x");
    assert_eq!(head.head_len, input.len() - 3);
    assert_eq!(&input[head.head_len..], b"abc");
    assert_eq!(head.framing, BodyFraming::ContentLength(3));
    assert_eq!(headers[1].name.of(input), b"Content-Length");
    assert_eq!(headers[1].value.of(input), b"3");
}

#[test]
fn methods_map_case_sensitively() {
    let methods = [
        ("GET", Method::Get),
        ("HEAD", Method::Head),
        ("POST", Method::Post),
        ("PUT", Method::Put),
        ("DELETE", Method::Delete),
        ("PATCH", Method::Patch),
        ("OPTIONS", Method::Options),
        ("TRACE", Method::Trace),
        ("get", Method::Other),
        ("Post", Method::Other),
        ("PROPFIND", Method::Other),
        ("M-SEARCH", Method::Other),
        ("!#$%&'*+-.^_`|~", Method::Other),
    ];
    for (token, method) in methods {
        let input = format!("{token} / HTTP/1.1\r\nHost: a\r\n\r\n");
        let (head, _) = complete(input.as_bytes());
        assert_eq!(head.method, method, "{token}");
        assert_eq!(head.method_span.of(input.as_bytes()), token.as_bytes());
    }
    // CONNECT never completes a head (405 or 400), so it is checked here.
    assert_eq!(Method::from_token(b"CONNECT"), Method::Connect);
    assert_eq!(Method::from_token(b"Connect"), Method::Other);
}

#[test]
fn absolute_form_spans_and_host() {
    // RFC 9112 3.2.2: the target's authority is the host; the Host field is ignored.
    let input = b"GET http://example.com:8080/a/b?x=1 HTTP/1.1\r\nHost: other.example\r\n\r\n";
    let (head, headers) = complete(input);
    assert_eq!(head.target.of(input), b"http://example.com:8080/a/b?x=1");
    assert_eq!(head.path.of(input), b"/a/b");
    assert_eq!(head.query.map(|query| query.of(input)), Some(&b"x=1"[..]));
    assert_eq!(
        head.host.map(|host| host.of(input)),
        Some(&b"example.com:8080"[..])
    );
    // The field itself is still there, as sent.
    assert_eq!(headers[0].value.of(input), b"other.example");
    assert_eq!(
        rush_proto::absolute_form_authority(head.target.of(input)),
        Some(&b"example.com:8080"[..])
    );

    // No path: empty (it means `/`), with or without a query.
    let input = b"GET HTTPS://[::1] HTTP/1.1\r\nHost: a\r\n\r\n";
    let (head, _) = complete(input);
    assert!(head.path.is_empty());
    assert_eq!(
        head.path.start as usize,
        input.len() - b" HTTP/1.1\r\nHost: a\r\n\r\n".len()
    );
    assert_eq!(head.query, None);
    assert_eq!(head.host.map(|host| host.of(input)), Some(&b"[::1]"[..]));
    let input = b"GET http://h?q=/x HTTP/1.1\r\nHost: a\r\n\r\n";
    let (head, _) = complete(input);
    assert!(head.path.is_empty());
    assert_eq!(head.query.map(|query| query.of(input)), Some(&b"q=/x"[..]));
    assert_eq!(head.host.map(|host| host.of(input)), Some(&b"h"[..]));

    // HTTP/1.0 needs no Host field; the target still names the host.
    let input = b"\r\nGET http://h:1/p HTTP/1.0\r\n\r\n";
    let (head, _) = complete(input);
    assert_eq!(head.path.of(input), b"/p");
    assert_eq!(head.host.map(|host| host.of(input)), Some(&b"h:1"[..]));

    // Origin-form: the host is the Host field; a path that looks like a URL is a path.
    let input = b"GET /http://x HTTP/1.1\r\nHost: a\r\n\r\n";
    let (head, _) = complete(input);
    assert_eq!(head.path.of(input), b"/http://x");
    assert_eq!(head.host.map(|host| host.of(input)), Some(&b"a"[..]));
    assert_eq!(
        rush_proto::absolute_form_authority(head.target.of(input)),
        None
    );
}

#[test]
fn expect_continue() {
    for (fields, expected) in [
        ("Expect: 100-continue\r\n", true),
        ("Expect: 100-Continue\r\n", true),
        ("expect:  100-CONTINUE \r\n", true),
        ("Expect: foo, 100-continue\r\n", true),
        ("Expect: 100-continued\r\n", false),
        ("Expect: 200-ok\r\n", false),
        ("X-Expect: 100-continue\r\n", false),
        ("", false),
    ] {
        let input = post_with(&format!("Content-Length: 5\r\n{fields}"), "");
        let (head, _) = complete(&input);
        assert_eq!(head.expect_continue, expected, "{fields:?}");
    }
    // RFC 9110 10.1.1: a 100-continue expectation in an HTTP/1.0 request is ignored.
    let (head, _) =
        complete(b"POST / HTTP/1.0\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
    assert!(!head.expect_continue);
}

#[test]
fn http_1_0_without_host_is_accepted() {
    let input = b"GET /old HTTP/1.0\r\nUser-Agent: x\r\n\r\n";
    let (head, _) = complete(input);
    assert_eq!(head.version, Version::Http10);
    assert_eq!(head.host, None);
    assert!(!head.keep_alive);
}

#[test]
fn pipelined_requests_parse_one_after_another() {
    let input = b"GET /first HTTP/1.1\r\nHost: a\r\n\r\nPOST /second HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhiGET /third HTTP/1.0\r\n\r\n";
    let limits = Limits::default();
    let mut headers = Vec::new();

    let Ok(HeadStatus::Complete(first)) = parse_request_head(input, &limits, &mut headers) else {
        panic!("first request");
    };
    assert_eq!(first.target.of(input), b"/first");
    assert_eq!(first.head_len, 32);
    assert!(input[first.head_len..].starts_with(b"POST /second"));

    let rest = &input[first.head_len..];
    let Ok(HeadStatus::Complete(second)) = parse_request_head(rest, &limits, &mut headers) else {
        panic!("second request");
    };
    assert_eq!(second.method, Method::Post);
    assert_eq!(second.target.of(rest), b"/second");
    assert_eq!(second.framing, BodyFraming::ContentLength(2));
    assert_eq!(&rest[second.head_len..second.head_len + 2], b"hi");
    assert_eq!(
        headers.len(),
        2,
        "the headers vector is cleared between heads"
    );

    let rest = &rest[second.head_len + 2..];
    let Ok(HeadStatus::Complete(third)) = parse_request_head(rest, &limits, &mut headers) else {
        panic!("third request");
    };
    assert_eq!(third.target.of(rest), b"/third");
    assert_eq!(third.version, Version::Http10);
    assert_eq!(third.head_len, rest.len());
    assert!(headers.is_empty());
}

#[test]
fn request_line_limit_is_exact() {
    let limits = Limits {
        max_request_line: 20,
        ..Limits::default()
    };
    // "GET /aaaaa HTTP/1.1" is 19 bytes; one more 'a' reaches the limit exactly.
    let exactly = b"GET /aaaaaa HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_eq!(exactly.iter().position(|&byte| byte == b'\r'), Some(20));
    assert!(matches!(
        parse_with(exactly, &limits).0,
        Ok(HeadStatus::Complete(_))
    ));
    let over = b"GET /aaaaaaa HTTP/1.1\r\nHost: a\r\n\r\n";
    assert_eq!(parse_with(over, &limits).0, Err(ProtoError::UriTooLong));
    // Incomplete: 22 bytes without a LF cannot become a line of 20.
    assert_eq!(parse_with(&over[..21], &limits).0, Ok(HeadStatus::Partial));
    assert_eq!(
        parse_with(&over[..22], &limits).0,
        Err(ProtoError::UriTooLong)
    );
    // The limit is measured from the request line, not from leading empty lines.
    let mut with_empty_lines = b"\r\n\r\n".to_vec();
    with_empty_lines.extend_from_slice(exactly);
    assert!(matches!(
        parse_with(&with_empty_lines, &limits).0,
        Ok(HeadStatus::Complete(_))
    ));
}

#[test]
fn head_size_limit_is_exact() {
    let input = b"GET / HTTP/1.1\r\nHost: a\r\nX: 12345\r\n\r\n";
    let exactly = Limits {
        max_head_size: input.len(),
        ..Limits::default()
    };
    assert!(matches!(
        parse_with(input, &exactly).0,
        Ok(HeadStatus::Complete(_))
    ));
    let one_less = Limits {
        max_head_size: input.len() - 1,
        ..Limits::default()
    };
    assert_eq!(
        parse_with(input, &one_less).0,
        Err(ProtoError::HeadersTooLarge)
    );
    assert_eq!(
        parse_with(&input[..input.len() - 2], &one_less).0,
        Ok(HeadStatus::Partial)
    );
    assert_eq!(
        parse_with(&input[..input.len() - 1], &one_less).0,
        Err(ProtoError::HeadersTooLarge)
    );
    // A body after a head that fits does not count.
    let mut with_body = input.to_vec();
    with_body.extend_from_slice(&[b'x'; 1000]);
    assert!(matches!(
        parse_with(&with_body, &exactly).0,
        Ok(HeadStatus::Complete(_))
    ));
}

#[test]
fn header_count_limit_is_exact() {
    for max_headers in [0, 1, 2, 5, 100, 128, 129, 300] {
        let limits = Limits {
            max_headers,
            max_head_size: 64 * 1024,
            ..Limits::default()
        };
        let mut input = b"GET / HTTP/1.0\r\n".to_vec();
        for index in 0..max_headers {
            input.extend_from_slice(format!("X-{index}: {index}\r\n").as_bytes());
        }
        let mut exactly = input.clone();
        exactly.extend_from_slice(b"\r\n");
        let (outcome, headers) = parse_with(&exactly, &limits);
        assert!(
            matches!(outcome, Ok(HeadStatus::Complete(_))),
            "{max_headers}: {outcome:?}"
        );
        assert_eq!(headers.len(), max_headers);
        if let Some(last) = headers.last() {
            assert_eq!(
                last.value.of(&exactly),
                (max_headers - 1).to_string().as_bytes()
            );
        }

        let mut over = input;
        over.extend_from_slice(b"X-Over: 1\r\n\r\n");
        assert_eq!(
            parse_with(&over, &limits).0,
            Err(ProtoError::HeadersTooLarge),
            "{max_headers}"
        );
    }
}

#[test]
fn headers_vector_is_reused() {
    let limits = Limits::default();
    let mut headers = Vec::with_capacity(16);
    let capacity = headers.capacity();
    headers.push(HeaderSpan::default());
    let input = b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n";
    for _ in 0..3 {
        let outcome = parse_request_head(input, &limits, &mut headers);
        assert!(matches!(outcome, Ok(HeadStatus::Complete(_))));
        assert_eq!(headers.len(), 3);
        assert_eq!(headers.capacity(), capacity);
    }
}

#[test]
fn long_heads_and_values() {
    // Values and targets long enough to go through httparse's SIMD paths.
    let target = format!("/{}", "segment/".repeat(200));
    let value = "v".repeat(4000);
    let input = format!("GET {target}?q=1 HTTP/1.1\r\nHost: a\r\nX-Long: {value}\r\n\r\n");
    let (head, headers) = complete(input.as_bytes());
    assert_eq!(head.path.of(input.as_bytes()), target.as_bytes());
    assert_eq!(headers[1].value.of(input.as_bytes()), value.as_bytes());

    for bad_byte in [0u8, 1, 8, 10, 11, 13, 27, 31, 127] {
        let mut input = format!("GET / HTTP/1.1\r\nHost: a\r\nX-Long: {value}").into_bytes();
        input.push(bad_byte);
        input.extend_from_slice(format!("{value}\r\n\r\n").as_bytes());
        let outcome = parse(&input);
        assert!(
            matches!(outcome, Err(ProtoError::BadRequest(_))),
            "byte {bad_byte:#x}: {outcome:?}"
        );
    }
}

#[test]
fn every_single_byte_in_a_field_value() {
    for byte in 0..=255u8 {
        let mut input = b"GET / HTTP/1.1\r\nHost: a\r\nX: a".to_vec();
        input.push(byte);
        input.extend_from_slice(b"b\r\n\r\n");
        let outcome = parse(&input);
        let allowed = byte == b'\t' || (0x20..0x7f).contains(&byte) || byte >= 0x80;
        if allowed {
            assert!(
                matches!(outcome, Ok(HeadStatus::Complete(_))),
                "{byte:#x}: {outcome:?}"
            );
        } else {
            assert!(
                matches!(outcome, Err(ProtoError::BadRequest(_))),
                "{byte:#x}: {outcome:?}"
            );
        }
    }
}

#[test]
fn every_single_byte_in_a_field_name() {
    for byte in 0..=255u8 {
        let mut input = b"GET / HTTP/1.1\r\nHost: a\r\nX".to_vec();
        input.push(byte);
        input.extend_from_slice(b"Y: 1\r\n\r\n");
        let outcome = parse(&input);
        let token = byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte);
        // A colon just ends the name early: "X: Y: 1" is the field X with value "Y: 1".
        if token || byte == b':' {
            assert!(
                matches!(outcome, Ok(HeadStatus::Complete(_))),
                "{byte:#x}: {outcome:?}"
            );
        } else {
            assert!(
                matches!(outcome, Err(ProtoError::BadRequest(_))),
                "{byte:#x}: {outcome:?}"
            );
        }
    }
}
