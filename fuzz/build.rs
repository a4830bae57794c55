//! The tair module's `long double` helper, which its included sources call.

fn main() {
    println!("cargo:rerun-if-changed=../tair-module/csrc/ldouble.c");
    cc::Build::new()
        .file("../tair-module/csrc/ldouble.c")
        .compile("verrou_ldouble");
}
