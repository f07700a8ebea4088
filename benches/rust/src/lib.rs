//! The command line shared by the peer servers: `--host H --port P --workers N`.
//!
//! The suite starts every server the same way; parsing by hand keeps the peers
//! free of dependencies that are not the framework under test.

use std::net::SocketAddr;

pub struct Options {
    pub address: SocketAddr,
    pub workers: usize,
}

/// Parses `--host` (default 127.0.0.1), `--port` (default 8000) and `--workers` (default 1);
/// exits with a usage line on anything else, so a typo never starts a server on the wrong port.
pub fn options() -> Options {
    let mut host = String::from("127.0.0.1");
    let mut port: u16 = 8000;
    let mut workers: usize = 1;
    let mut arguments = std::env::args().skip(1);
    while let Some(flag) = arguments.next() {
        let value = arguments
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--host" => host = value,
            "--port" => {
                port = value
                    .parse()
                    .unwrap_or_else(|_| usage("--port takes a number"))
            }
            "--workers" => {
                workers = value
                    .parse()
                    .unwrap_or_else(|_| usage("--workers takes a number"))
            }
            _ => usage(&format!("unknown option {flag}")),
        }
    }
    let address = format!("{host}:{port}")
        .parse()
        .unwrap_or_else(|_| usage("--host takes an IP address"));
    Options {
        address,
        workers: workers.max(1),
    }
}

fn usage(problem: &str) -> ! {
    eprintln!("{problem}\nusage: SERVER [--host IP] [--port PORT] [--workers N]");
    std::process::exit(2)
}
