//! Compiles `proto/` to Rust with protox (pure Rust, no system `protoc`),
//! tonic stubs, and pbjson serde impls (proto3 JSON mapping, used by the CLI).

use std::{env, fs, path::PathBuf};

use prost::Message as _;

const PROTO: &str = "proto/context_assembler/v1/assembler.proto";
/// Envoy's external processor: a wire-compatible subset (proto/vendor/README.md).
const EXT_PROC: &str = "envoy/service/ext_proc/v3/external_processor.proto";
/// The one message whose Rust type is not generated.
const COUNT_REQUEST: &str = ".context_assembler.v1.CountTokensRequest";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let fds = protox::compile([PROTO], ["proto"])?;
    let descriptor_path = out_dir.join("context_assembler_descriptor.bin");
    fs::write(&descriptor_path, fds.encode_to_vec())?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_well_known_types(false)
        .codec_path("crate::grpc::codec::TimedCodec")
        // Written by hand so its text is a slice of the received message
        // (src/grpc/count_request.rs); the same wire format.
        .extern_path(COUNT_REQUEST, "crate::grpc::count_request::CountTokensRequest")
        .compile_fds(fds.clone())?;

    pbjson_build::Builder::new()
        .register_descriptors(&fs::read(&descriptor_path)?)?
        .out_dir(&out_dir)
        .exclude([COUNT_REQUEST])
        .build(&[".context_assembler"])?;

    // Envoy's messages with prost's own codec (the gate meters them; no
    // decode timing by the Assembler's codec), and no JSON mapping.
    let envoy = protox::compile([EXT_PROC], ["proto/vendor"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_well_known_types(false)
        // Bodies as `Bytes`: a received body is a slice of its message.
        .bytes(".envoy")
        .compile_fds(envoy)?;
    Ok(())
}
