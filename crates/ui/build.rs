//! Rebuilds the crate when a file of the web page changes: `include_dir!`
//! embeds them, but cargo does not know that the crate reads them.

fn main() {
    println!("cargo:rerun-if-changed=assets");
}
