//! Compiles the small C helper that does EXINCRBYFLOAT's `long double` arithmetic.

fn main() {
    println!("cargo:rerun-if-changed=csrc/ldouble.c");
    cc::Build::new()
        .file("csrc/ldouble.c")
        .warnings(true)
        .compile("verrou_ldouble");
}
