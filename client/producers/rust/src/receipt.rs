//! The runtimes' `ExecutionReceipt` structs, as receiptd reads them.
//!
//! Field order is declaration order, which is what rmp-serde writes: the
//! map form (`rmp_serde::to_vec_named`) keys them by name, the array form
//! (`rmp_serde::to_vec`) by position, so the order is part of the wire
//! contract (PROTOCOL section 4). Schemas 1 and 2 share [`ExecutionReceiptV2`]
//! (schema 1 is schema 2 without `tuning_profile`, read as ""); schema 3 is
//! [`ExecutionReceipt`]. The crate's tests encode the shared vectors of
//! tests/data/vectors, written by the runtimes' own structs, and compare the
//! bytes.

use serde::{Deserialize, Serialize};

/// The newest receipt schema, [`ExecutionReceipt`]'s `schema_version`.
pub const SCHEMA_VERSION: u16 = 3;

/// A backend, written as its kebab-case name (`"wgpu-dx12"`) in both forms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    Cpu,
    WgpuDx12,
    WgpuVulkan,
    WgpuMetal,
    Cuda,
    Metal,
    Unknown,
}

/// Coverage bit of a counter: set when the runtime measured it (possibly
/// as zero), clear when it is unknown. Bits 0-9 are [`CountersV2`]'s
/// fields in order, 10-22 the schema-3 counters, 23-25 [`Latency`].
pub mod coverage {
    pub const DECODE_STEPS: u64 = 1 << 0;
    pub const GRAPH_LAUNCHES: u64 = 1 << 1;
    pub const COMPUTE_DISPATCHES: u64 = 1 << 2;
    pub const DEVICE_FENCES: u64 = 1 << 3;
    pub const HOST_TO_DEVICE_BYTES: u64 = 1 << 4;
    pub const DEVICE_TO_HOST_BYTES: u64 = 1 << 5;
    pub const FALLBACK_COUNT: u64 = 1 << 6;
    pub const HOT_PATH_ALLOCATIONS: u64 = 1 << 7;
    pub const COMPILE_CALLS: u64 = 1 << 8;
    pub const IMMUTABLE_UPLOAD_BYTES: u64 = 1 << 9;
    /// Every bit with a meaning in schemas 1 and 2.
    pub const ALL_V2: u64 = (1 << 10) - 1;
    /// Every bit with a meaning in schema 3.
    pub const ALL_V3: u64 = (1 << 26) - 1;
}

/// Schema-3 receipt (`schema_version` 3).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionReceipt {
    pub schema_version: u16,
    pub requested_backend: Backend,
    pub executed_backend: Backend,
    pub model_instance_id: String,
    pub prepared_plan_id: String,
    pub graph_hash: String,
    #[serde(default)]
    pub tuning_profile: String,
    pub stop_reason: String,
    pub counter_coverage: u64,
    pub counters: Counters,
    #[serde(default)]
    pub latency: Latency,
    pub artifacts: Artifacts,
}

/// Schema-1 and schema-2 receipt (`schema_version` 1 or 2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionReceiptV2 {
    pub schema_version: u16,
    pub requested_backend: Backend,
    pub executed_backend: Backend,
    pub model_instance_id: String,
    pub prepared_plan_id: String,
    pub graph_hash: String,
    #[serde(default)]
    pub tuning_profile: String,
    pub stop_reason: String,
    pub counter_coverage: u64,
    pub counters: CountersV2,
    pub artifacts: Artifacts,
}

/// Schema-3 counters: the ten of schema 2, then thirteen more (missing
/// trailing ones read as 0, as they did before they existed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    pub decode_steps: u64,
    pub graph_launches: u64,
    pub compute_dispatches: u64,
    pub device_fences: u64,
    pub host_to_device_bytes: u64,
    pub device_to_host_bytes: u64,
    pub fallback_count: u64,
    pub hot_path_allocations: u64,
    pub compile_calls: u64,
    pub immutable_upload_bytes: u64,
    #[serde(default)]
    pub submitted_prefill_tokens: u64,
    #[serde(default)]
    pub committed_prefill_tokens: u64,
    #[serde(default)]
    pub cached_prefill_tokens: u64,
    #[serde(default)]
    pub queued_requests: u64,
    #[serde(default)]
    pub admitted_requests: u64,
    #[serde(default)]
    pub cow_copies: u64,
    #[serde(default)]
    pub evictions: u64,
    #[serde(default)]
    pub unique_freed_pages: u64,
    #[serde(default)]
    pub pool_high_water_bytes: u64,
    #[serde(default)]
    pub cancellations: u64,
    #[serde(default)]
    pub graph_bucket_tokens: u64,
    #[serde(default)]
    pub graph_padding_tokens: u64,
    #[serde(default)]
    pub rebuild_outcomes: u64,
}

/// Schema-1 and schema-2 counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CountersV2 {
    pub decode_steps: u64,
    pub graph_launches: u64,
    pub compute_dispatches: u64,
    pub device_fences: u64,
    pub host_to_device_bytes: u64,
    pub device_to_host_bytes: u64,
    pub fallback_count: u64,
    pub hot_path_allocations: u64,
    pub compile_calls: u64,
    pub immutable_upload_bytes: u64,
}

/// Schema-3 latencies, microseconds (coverage bits 23-25).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Latency {
    #[serde(default)]
    pub queue_delay_us: u64,
    #[serde(default)]
    pub time_to_first_token_us: u64,
    #[serde(default)]
    pub inter_token_latency_us: u64,
}

/// Temporary artifacts of a run (no coverage bits).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifacts {
    pub temp_created_bytes: u64,
    pub temp_removed_bytes: u64,
    pub temp_retained_bytes: u64,
    pub temp_cleanup_failures: u64,
}

impl Default for Backend {
    fn default() -> Backend {
        Backend::Unknown
    }
}

impl ExecutionReceipt {
    /// What the runtime's own check says: the executed backend is the
    /// requested one and no fallback was counted (receiptd's `clean` or
    /// `unproven`).
    pub fn backend_matches_request(&self) -> bool {
        self.requested_backend == self.executed_backend && self.counters.fallback_count == 0
    }
}

impl ExecutionReceiptV2 {
    /// As [`ExecutionReceipt::backend_matches_request`].
    pub fn backend_matches_request(&self) -> bool {
        self.requested_backend == self.executed_backend && self.counters.fallback_count == 0
    }
}
