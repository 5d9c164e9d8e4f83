fn main() {
    eprintln!("koord-applier: not built yet");
    std::process::exit(2);
}
