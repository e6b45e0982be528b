fn main() {
    let args: Vec<String> = std::env::args().collect();
    match compnet::cli::main_with_args(args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("compnet: error: {e}");
            std::process::exit(1);
        }
    }
}
