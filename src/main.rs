use tracing_subscriber::EnvFilter;

const USAGE: &str = "usage: vbmq serve --disk socket=PATH,... [--disk ...]\n       vbmq bench [--quick] [--out DIR]";

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let status = match args.first().map(String::as_str) {
        Some("serve") => vbmq::serve::run(&args[1..]),
        Some("bench") => vbmq::bench::run(&args[1..]),
        Some("--help" | "-h" | "help") => {
            println!("{USAGE}");
            0
        }
        _ => {
            eprintln!("{USAGE}");
            2
        }
    };
    std::process::exit(status);
}
