fn main() {
    let args: Vec<String> = std::env::args().collect();
    let result = compnet::cli::main_with_args(args);
    compnet::matrix::device::report_profile();
    if let Some(table) = compnet::run::profile::report() {
        eprint!("{table}");
    }
    match result {
        Ok(code) => std::process::exit(code),
        // A reader that stopped early (`compnet compute ... | head`) is not an error.
        Err(compnet::Error::Io { source, .. })
            if source.kind() == std::io::ErrorKind::BrokenPipe =>
        {
            std::process::exit(0)
        }
        Err(e) => std::process::exit(compnet::cli::report_error(&e)),
    }
}
