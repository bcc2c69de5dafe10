//! Rebuild when a migration is added: `embed_migrations!` only tracks files it already saw.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
