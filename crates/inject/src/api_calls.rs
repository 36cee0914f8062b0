//! The API calls a profile needs, by CUPTI's callback ids: launches (which
//! NVTX range they were made in: the kernel runs later, outside it), graph
//! launches (a step of a program that replays graphs), host
//! synchronisations (the steps of a program that has neither), and copies
//! and sets; and CUPTI's activity record of one as an [`ApiCall`].
//!
//! A foundation: uses no other module of the library.

use cudarc::cupti::sys;
use kernelscope_trace::{ApiCall, ApiWhat};

/// `CUpti_CallbackDomain` values.
pub(crate) const RUNTIME_DOMAIN: u32 = 2;
pub(crate) const DRIVER_DOMAIN: u32 = 1;

/// Callback ids (stable across CUDA versions: ids are only ever appended;
/// each checked against cudarc's `CUpti_runtime_api_trace_cbid` and
/// `CUpti_driver_api_trace_cbid`). The runtime's copies are listed beyond
/// those the profile needs: the driver copy each makes inside it is then
/// known for the same call seen twice, not taken for a call of its own.
pub(crate) const RUNTIME_CALLS: &[(u32, ApiWhat)] = &[
    (211, ApiWhat::Launch),      // cudaLaunchKernel_v7000
    (214, ApiWhat::Launch),      // cudaLaunchKernel_ptsz_v7000
    (430, ApiWhat::Launch),      // cudaLaunchKernelExC_v11060
    (431, ApiWhat::Launch),      // cudaLaunchKernelExC_ptsz_v11060
    (269, ApiWhat::Launch),      // cudaLaunchCooperativeKernel_v9000
    (270, ApiWhat::Launch),      // cudaLaunchCooperativeKernel_ptsz_v9000
    (311, ApiWhat::GraphLaunch), // cudaGraphLaunch_v10000
    (312, ApiWhat::GraphLaunch), // cudaGraphLaunch_ptsz_v10000
    (165, ApiWhat::Sync),        // cudaDeviceSynchronize_v3020
    (126, ApiWhat::Sync),        // cudaThreadSynchronize_v3020
    (131, ApiWhat::Sync),        // cudaStreamSynchronize_v3020
    (239, ApiWhat::Sync),        // cudaStreamSynchronize_ptsz_v7000
    (137, ApiWhat::Sync),        // cudaEventSynchronize_v3020
    (31, ApiWhat::Sync),         // cudaMemcpy_v3020: waits for the copy
    (32, ApiWhat::Sync),         // cudaMemcpy2D_v3020
    (39, ApiWhat::Sync),         // cudaMemcpyToSymbol_v3020
    (40, ApiWhat::Sync),         // cudaMemcpyFromSymbol_v3020
    (47, ApiWhat::Memory),       // cudaMemcpyToSymbolAsync_v3020
    (48, ApiWhat::Memory),       // cudaMemcpyFromSymbolAsync_v3020
    (161, ApiWhat::Memory),      // cudaMemcpyPeerAsync_v4000
    (41, ApiWhat::Memory),       // cudaMemcpyAsync_v3020
    (44, ApiWhat::Memory),       // cudaMemcpy2DAsync_v3020
    (225, ApiWhat::Memory),      // cudaMemcpyAsync_ptsz_v7000
    (49, ApiWhat::Memory),       // cudaMemset_v3020
    (51, ApiWhat::Memory),       // cudaMemsetAsync_v3020
    (235, ApiWhat::Memory),      // cudaMemsetAsync_ptsz_v7000
];

pub(crate) const DRIVER_CALLS: &[(u32, ApiWhat)] = &[
    (307, ApiWhat::Launch),      // cuLaunchKernel
    (442, ApiWhat::Launch),      // cuLaunchKernel_ptsz
    (652, ApiWhat::Launch),      // cuLaunchKernelEx
    (653, ApiWhat::Launch),      // cuLaunchKernelEx_ptsz
    (477, ApiWhat::Launch),      // cuLaunchCooperativeKernel
    (478, ApiWhat::Launch),      // cuLaunchCooperativeKernel_ptsz
    (514, ApiWhat::GraphLaunch), // cuGraphLaunch
    (515, ApiWhat::GraphLaunch), // cuGraphLaunch_ptsz
    (17, ApiWhat::Sync),         // cuCtxSynchronize
    (800, ApiWhat::Sync),        // cuCtxSynchronize_v2
    (126, ApiWhat::Sync),        // cuStreamSynchronize
    (440, ApiWhat::Sync),        // cuStreamSynchronize_ptsz
    (121, ApiWhat::Sync),        // cuEventSynchronize
    (276, ApiWhat::Sync),        // cuMemcpyHtoD_v2
    (278, ApiWhat::Sync),        // cuMemcpyDtoH_v2
    (277, ApiWhat::Memory),      // cuMemcpyHtoDAsync_v2
    (279, ApiWhat::Memory),      // cuMemcpyDtoHAsync_v2
    (281, ApiWhat::Memory),      // cuMemcpyDtoDAsync_v2
    (306, ApiWhat::Memory),      // cuMemcpyAsync
    (216, ApiWhat::Memory),      // cuMemsetD8Async
    (220, ApiWhat::Memory),      // cuMemsetD32Async
];

/// CUPTI's activity record of a runtime (`driver` false) or driver call as
/// an [`ApiCall`] whose range is to be found by time; `None` for a call
/// that is not one of ours.
pub(crate) fn api_call_of(record: &sys::CUpti_ActivityAPI, driver: bool) -> Option<ApiCall> {
    let domain = if driver { DRIVER_DOMAIN } else { RUNTIME_DOMAIN };
    let what = what_of(domain, record.cbid)?;
    Some(ApiCall {
        start_ns: record.start,
        end_ns: record.end.max(record.start),
        thread: u64::from(record.threadId),
        range: kernelscope_trace::RANGE_BY_TIME,
        correlation: record.correlationId,
        callback: record.cbid,
        domain: u32::from(driver),
        what: what as u32,
    })
}

/// CUPTI's callback domain of [`RUNTIME_DOMAIN`] or [`DRIVER_DOMAIN`].
pub(crate) fn domain_of(domain: u32) -> sys::CUpti_CallbackDomain {
    if domain == RUNTIME_DOMAIN {
        sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API
    } else {
        sys::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API
    }
}

/// What the call `callback` of `domain` does, when it is one of ours.
pub(crate) fn what_of(domain: u32, callback: u32) -> Option<ApiWhat> {
    let calls = match domain {
        RUNTIME_DOMAIN => RUNTIME_CALLS,
        DRIVER_DOMAIN => DRIVER_CALLS,
        _ => return None,
    };
    calls
        .iter()
        .find(|&&(id, _)| id == callback)
        .map(|&(_, what)| what)
}
