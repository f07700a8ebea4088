//! hyper's hello world: every request is answered `Hello, World!` (text/plain).
//!
//! hyper is a library, not a framework: this is the usual accept loop spawning one task per
//! connection. `--workers 1` runs it on tokio's current-thread runtime, `--workers N` on a
//! multi-thread runtime with N worker threads. HTTP/1 `pipeline_flush` gathers the responses to
//! pipelined requests into one write, hyper's own answer to pipelining.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpSocket;

async fn hello(_request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let response = Response::builder()
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from_static(b"Hello, World!")))
        .expect("a fixed response is valid");
    Ok(response)
}

async fn serve(options: rush_bench_peers::Options) -> std::io::Result<()> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(options.address)?;
    let listener = socket.listen(2048)?;
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        tokio::spawn(async move {
            // A client that disconnects mid-request is not the server's error: nothing to report.
            let _ = http1::Builder::new()
                .pipeline_flush(true)
                .serve_connection(TokioIo::new(stream), service_fn(hello))
                .await;
        });
    }
}

fn main() -> std::io::Result<()> {
    let options = rush_bench_peers::options();
    let runtime = if options.workers == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.workers)
            .enable_all()
            .build()?
    };
    runtime.block_on(serve(options))
}
