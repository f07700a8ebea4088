//! Replays saved inputs through a target's checks, without any fuzzing
//! runtime: `cargo run --release --bin reproduce -- TARGET FILE_OR_DIR...`.
//! A directory means every file in it. A failing check panics with the
//! invariant and the input; otherwise it prints how many inputs passed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn inputs(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let entry = entry?.path();
        if entry.is_file() {
            files.push(entry);
        }
    }
    files.sort();
    Ok(files)
}

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let Some((target, paths)) = arguments.split_first() else {
        eprintln!(
            "usage: reproduce TARGET FILE_OR_DIR...  (targets: {})",
            rush_proto_fuzz::TARGETS.join(", ")
        );
        return ExitCode::FAILURE;
    };
    let mut count = 0;
    for path in paths {
        let files = match inputs(Path::new(path)) {
            Ok(files) => files,
            Err(error) => {
                eprintln!("{path}: {error}");
                return ExitCode::FAILURE;
            }
        };
        for file in files {
            let data = match std::fs::read(&file) {
                Ok(data) => data,
                Err(error) => {
                    eprintln!("{}: {error}", file.display());
                    return ExitCode::FAILURE;
                }
            };
            eprintln!("{}", file.display());
            if rush_proto_fuzz::run_target(target, &data).is_none() {
                eprintln!("unknown target {target}");
                return ExitCode::FAILURE;
            }
            count += 1;
        }
    }
    println!("{count} inputs passed the {target} checks");
    ExitCode::SUCCESS
}
