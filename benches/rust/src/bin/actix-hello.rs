//! actix-web's hello world: `GET /` answers `Hello, World!` (text/plain), anything else 404.
//!
//! `--workers N` starts N actix workers (each a thread with its own single-threaded runtime,
//! actix's own way to use several cores) behind actix's accept thread.

use actix_web::{web, App, HttpResponse, HttpServer};

async fn hello() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain")
        .body("Hello, World!")
}

#[actix_web::main]
async fn main() -> std::io::Result<()> {
    let options = rush_bench_peers::options();
    HttpServer::new(|| App::new().route("/", web::get().to(hello)))
        .workers(options.workers)
        .backlog(2048)
        .bind(options.address)?
        .run()
        .await
}
