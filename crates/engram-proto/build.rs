//! Compiles `proto/` with protox (a pure-Rust protobuf compiler), so no system `protoc` is
//! needed, and keeps the descriptor set for gRPC server reflection.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read when the script runs, not baked in when it is compiled: a compiler cache may serve
    // this script compiled in another checkout, and `env!` would point it at that checkout's
    // protos.
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let file = root.join("engram/v1/engram.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let fds = protox::compile([&file], [&root])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptor = out.join("engram_descriptor.bin");
    std::fs::write(&descriptor, fds.encode_to_vec())?;
    // The simulation build (`--cfg madsim`) uses madsim-tonic's generated services, written to
    // OUT_DIR/sim, which `tonic::include_proto!` picks under madsim. It reads the descriptor
    // set written above instead of running protoc. It runs first because it also writes the
    // plain tonic code, which the next step overwrites with the codec-aware version.
    if std::env::var_os("CARGO_CFG_MADSIM").is_some() {
        madsim_tonic_build::configure()
            .build_client(true)
            .build_server(true)
            .file_descriptor_set_path(&descriptor)
            .skip_protoc_run()
            .compile_protos(&[&file], &[&root])?;
    }
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .codec_path("crate::codec::WireCodec")
        .compile_fds(fds)?;
    Ok(())
}
