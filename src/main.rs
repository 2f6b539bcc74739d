fn main() {
    // Filled in by the `vbmq serve` work: see src/lib.rs for the layout.
    std::process::exit(2);
}
