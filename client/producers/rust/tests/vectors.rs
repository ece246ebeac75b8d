//! The crate's structs against the shared vectors (tests/data/vectors),
//! which the runtimes' own Rust structs wrote with rmp-serde 1.1.1: the
//! same values encode to the same bytes, in both forms.
//!
//! RECEIPTD_VECTORS names the directory (run-tests.sh sets it); by default
//! the one of the source tree.

use std::fs;
use std::path::PathBuf;

use receiptd_producer::{
    Artifacts, Backend, Counters, ExecutionReceipt, ExecutionReceiptV2, Latency,
};

fn dir() -> PathBuf {
    match std::env::var_os("RECEIPTD_VECTORS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../tests/data/vectors"),
    }
}

fn read(name: &str) -> Vec<u8> {
    let p = dir().join(name);
    fs::read(&p).unwrap_or_else(|e| panic!("{}: {}", p.display(), e))
}

/// Every vector's name, from the *.named.msgpack files.
fn names() -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir())
        .expect("the vectors directory")
        .filter_map(|e| {
            let n = e.ok()?.file_name().into_string().ok()?;
            n.strip_suffix(".named.msgpack").map(str::to_string)
        })
        .collect();
    v.sort();
    v
}

/// s3_full_coverage_latency, written out field by field from its .json.
fn full_coverage_latency() -> ExecutionReceipt {
    ExecutionReceipt {
        schema_version: 3,
        requested_backend: Backend::Cuda,
        executed_backend: Backend::Cuda,
        model_instance_id: "llama-3-70b#2".into(),
        prepared_plan_id: "plan-cuda-graph-9".into(),
        graph_hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
        tuning_profile: "cuda:sm_90;graph-buckets=256,512,1024,2048".into(),
        stop_reason: "eos".into(),
        counter_coverage: 67108863,
        counters: Counters {
            decode_steps: 512,
            graph_launches: 2,
            compute_dispatches: 8192,
            device_fences: 4,
            host_to_device_bytes: 33554432,
            device_to_host_bytes: 262144,
            fallback_count: 0,
            hot_path_allocations: 9,
            compile_calls: 1,
            immutable_upload_bytes: 7516192768,
            submitted_prefill_tokens: 2048,
            committed_prefill_tokens: 1984,
            cached_prefill_tokens: 64,
            queued_requests: 5,
            admitted_requests: 4,
            cow_copies: 11,
            evictions: 13,
            unique_freed_pages: 17,
            pool_high_water_bytes: 1073741824,
            cancellations: 1,
            graph_bucket_tokens: 2560,
            graph_padding_tokens: 512,
            rebuild_outcomes: 19,
        },
        latency: Latency {
            queue_delay_us: 1250,
            time_to_first_token_us: 48000,
            inter_token_latency_us: 22500,
        },
        artifacts: Artifacts {
            temp_created_bytes: 8192,
            temp_removed_bytes: 8192,
            temp_retained_bytes: 0,
            temp_cleanup_failures: 0,
        },
    }
}

#[test]
fn a_receipt_built_by_hand_encodes_as_the_runtime_wrote_it() {
    let r = full_coverage_latency();
    assert_eq!(
        rmp_serde::to_vec_named(&r).unwrap(),
        read("s3_full_coverage_latency.named.msgpack")
    );
    assert_eq!(
        rmp_serde::to_vec(&r).unwrap(),
        read("s3_full_coverage_latency.compact.msgpack")
    );
    assert!(r.backend_matches_request());
}

/// Decodes both files of a schema-2 or schema-3 vector and encodes the
/// value again, in both forms: the bytes must be the files' own.
fn roundtrip<T>(name: &str)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let named = read(&format!("{}.named.msgpack", name));
    let compact = read(&format!("{}.compact.msgpack", name));
    let from_named: T = rmp_serde::from_slice(&named).unwrap_or_else(|e| panic!("{}: {}", name, e));
    let from_compact: T =
        rmp_serde::from_slice(&compact).unwrap_or_else(|e| panic!("{}: {}", name, e));
    assert_eq!(from_named, from_compact, "{}: the two forms differ", name);
    assert_eq!(
        rmp_serde::to_vec_named(&from_named).unwrap(),
        named,
        "{} named",
        name
    );
    assert_eq!(
        rmp_serde::to_vec(&from_named).unwrap(),
        compact,
        "{} compact",
        name
    );
}

#[test]
fn every_vector_encodes_byte_for_byte() {
    let names = names();
    assert_eq!(names.len(), 28, "vectors in {}", dir().display());
    for n in &names {
        if n.starts_with("s3_") {
            roundtrip::<ExecutionReceipt>(n);
        } else if n.starts_with("s2_") {
            roundtrip::<ExecutionReceiptV2>(n);
        } else {
            // Schema 1: a schema-2 map without tuning_profile (both files).
            for form in ["named", "compact"] {
                let r: ExecutionReceiptV2 =
                    rmp_serde::from_slice(&read(&format!("{}.{}.msgpack", n, form))).unwrap();
                assert_eq!(r.schema_version, 1, "{}", n);
                assert_eq!(r.tuning_profile, "", "{}", n);
            }
        }
    }
}

#[test]
fn backends_are_kebab_case_strings() {
    let all = [
        (Backend::Cpu, "cpu"),
        (Backend::WgpuDx12, "wgpu-dx12"),
        (Backend::WgpuVulkan, "wgpu-vulkan"),
        (Backend::WgpuMetal, "wgpu-metal"),
        (Backend::Cuda, "cuda"),
        (Backend::Metal, "metal"),
        (Backend::Unknown, "unknown"),
    ];
    for (b, s) in all {
        let mut want = vec![0xa0 | s.len() as u8];
        want.extend_from_slice(s.as_bytes());
        assert_eq!(rmp_serde::to_vec(&b).unwrap(), want, "{}", s);
    }
}
