//! GEMM through cuBLASLt (loaded at run time like the driver): one handle
//! and one workspace per device, and a plan per shape (layouts, the
//! heuristic's algorithm, and how many kernels the call launches). The
//! count is what lets CUPTI's records, which arrive one per kernel in stream
//! order, be matched to a library dispatch whose kernels we do not name: it
//! is read once per plan from a throwaway capture of the call on a side
//! stream, which launches nothing.

use std::collections::HashMap;
use std::ffi::c_void;
use std::mem::{MaybeUninit, size_of};
use std::sync::{Arc, Mutex};

use cudarc::cublaslt::result::{self as lt, CublasError};
use cudarc::cublaslt::sys as lt_sys;
use cudarc::driver::{CudaContext, CudaStream, result as driver_result, sys};

use super::driver::{allocation_error, driver_error};
use crate::error::{Error, Remedy, Result};
use crate::runtime::DType;

/// Workspace cuBLASLt may use per call; NVIDIA recommends 32 MiB on Hopper.
const WORKSPACE_BYTES: usize = 32 << 20;

/// Alignment the plans assume of every matrix pointer, checked per launch:
/// enough for Hopper's TMA kernels, and what every allocation and the row
/// slices the engine takes of them have.
const POINTER_ALIGNMENT: u32 = 16;

fn blas_error(operation: &str) -> impl FnOnce(CublasError) -> Error + '_ {
    move |source| Error::Blas {
        operation: operation.to_string(),
        source,
    }
}

/// What cuBLASLt is missing for, as an error naming the workaround.
pub(crate) fn unavailable(kernel: &str) -> Error {
    Error::KernelMissing {
        name: kernel.to_string(),
        backend: "cuda",
        workaround: "its GEMM runs through cuBLASLt, which could not be loaded (libcublasLt.so of CUDA 12/13); install cuBLAS".into(),
        remedies: &[Remedy::OtherDevice { device: "cpu" }],
    }
}

/// Whether cuBLASLt can be loaded.
pub(crate) fn present() -> bool {
    // SAFETY: only tries to load the library by its known names.
    unsafe { lt_sys::is_culib_present() }
}

/// A shape's GEMM: `out[m, n] = x[m, k] · weight[n, k]ᵀ`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct GemmShape {
    pub dtype: DType,
    pub m: u32,
    pub n: u32,
    pub k: u32,
}

/// The device pointers of one GEMM.
#[derive(Clone, Copy)]
pub(crate) struct GemmPointers {
    pub weight: sys::CUdeviceptr,
    pub x: sys::CUdeviceptr,
    pub out: sys::CUdeviceptr,
}

/// Everything one shape's call needs but the pointers.
pub(crate) struct GemmPlan {
    description: lt_sys::cublasLtMatmulDesc_t,
    weight_layout: lt_sys::cublasLtMatrixLayout_t,
    x_layout: lt_sys::cublasLtMatrixLayout_t,
    out_layout: lt_sys::cublasLtMatrixLayout_t,
    algorithm: lt_sys::cublasLtMatmulAlgo_t,
    /// Kernels one call launches.
    kernels: u32,
}

// SAFETY: the handles are plain descriptors, read (never changed) after
// the plan is made; cuBLASLt allows their use from any thread.
unsafe impl Send for GemmPlan {}
// SAFETY: as above.
unsafe impl Sync for GemmPlan {}

impl GemmPlan {
    /// How many kernels one call launches (what CUPTI will report).
    pub(crate) fn kernels(&self) -> u32 {
        self.kernels
    }
}

impl Drop for GemmPlan {
    fn drop(&mut self) {
        // SAFETY: each handle was created for this plan and is destroyed
        // once; failures leave nothing to do.
        unsafe {
            let _ = lt::destroy_matrix_layout(self.weight_layout);
            let _ = lt::destroy_matrix_layout(self.x_layout);
            let _ = lt::destroy_matrix_layout(self.out_layout);
            let _ = lt::destroy_matmul_desc(self.description);
        }
    }
}

/// One device's cuBLASLt handle, workspace, plans and the side stream the
/// plans' launches are counted on.
pub(crate) struct Blas {
    handle: lt_sys::cublasLtHandle_t,
    workspace: sys::CUdeviceptr,
    plans: Mutex<HashMap<GemmShape, Arc<GemmPlan>>>,
    side_stream: Arc<CudaStream>,
    context: Arc<CudaContext>,
}

// SAFETY: cuBLASLt handles may be used from any thread; every call that
// enqueues work happens under the device's submission lock.
unsafe impl Send for Blas {}
// SAFETY: as above; the plan map is behind a mutex.
unsafe impl Sync for Blas {}

impl Drop for Blas {
    fn drop(&mut self) {
        // Plans first (they hold descriptors, not device memory), then the
        // handle and the workspace, with the context bound.
        crate::sync::lock(&self.plans).clear();
        if self.context.bind_to_thread().is_ok() {
            // No call may still be using the workspace.
            let _ = self.context.synchronize();
            // SAFETY: created in `new`, destroyed once, after every stream
            // of the context has finished.
            unsafe {
                let _ = lt::destroy_handle(self.handle);
                let _ = driver_result::free_sync(self.workspace);
            }
        }
    }
}

impl Blas {
    /// Opens cuBLASLt on `context` (bound by the caller).
    pub(crate) fn new(context: &Arc<CudaContext>) -> Result<Blas> {
        if !present() {
            return Err(unavailable("a GEMM"));
        }
        let handle = lt::create_handle().map_err(blas_error("creating a handle"))?;
        // SAFETY: a plain device allocation of this (bound) context.
        let workspace = match unsafe { driver_result::malloc_sync(WORKSPACE_BYTES) } {
            Ok(workspace) => workspace,
            Err(error) => {
                // SAFETY: just created, not used.
                let _ = unsafe { lt::destroy_handle(handle) };
                return Err(allocation_error(
                    "allocating cuBLASLt's workspace",
                    WORKSPACE_BYTES,
                )(error));
            }
        };
        let side_stream = match context.new_stream() {
            Ok(stream) => stream,
            Err(error) => {
                // SAFETY: just created, not used.
                unsafe {
                    let _ = lt::destroy_handle(handle);
                    let _ = driver_result::free_sync(workspace);
                }
                return Err(driver_error("creating cuBLASLt's side stream")(error));
            }
        };
        Ok(Blas {
            handle,
            workspace,
            plans: Mutex::new(HashMap::new()),
            side_stream,
            context: context.clone(),
        })
    }

    /// The plan of `shape`, made (and its launches counted, with
    /// `pointers` as stand-ins) on first use. Must not be called while the
    /// device's stream is being captured.
    pub(crate) fn plan(&self, shape: GemmShape, pointers: GemmPointers) -> Result<Arc<GemmPlan>> {
        if let Some(plan) = crate::sync::lock(&self.plans).get(&shape) {
            return Ok(plan.clone());
        }
        let mut plan = self.make_plan(shape)?;
        plan.kernels = self.count_kernels(&plan, pointers)?;
        let plan = Arc::new(plan);
        crate::sync::lock(&self.plans).insert(shape, plan.clone());
        Ok(plan)
    }

    /// Enqueues one call of `plan` on `stream`.
    pub(crate) fn launch(
        &self,
        plan: &GemmPlan,
        pointers: GemmPointers,
        stream: sys::CUstream,
    ) -> Result<()> {
        for (role, pointer) in [
            ("weight", pointers.weight),
            ("x", pointers.x),
            ("out", pointers.out),
        ] {
            if pointer % u64::from(POINTER_ALIGNMENT) != 0 {
                return Err(Error::KernelFailed {
                    kernel: "gemm".into(),
                    message: format!(
                        "the {role} pointer {pointer:#x} is not {POINTER_ALIGNMENT}-byte aligned, as cuBLASLt's plans assume"
                    ),
                });
            }
        }
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: the descriptors belong to the plan (alive for the call);
        // the pointers are device memory of this context holding the shapes
        // the plan was made for (the op checked the buffers' shapes); the
        // workspace is ours and used only on streams we order; alpha and
        // beta are f32 as the scale type says and are read before return.
        unsafe {
            lt::matmul(
                self.handle,
                plan.description,
                (&alpha as *const f32).cast::<c_void>(),
                (&beta as *const f32).cast::<c_void>(),
                pointers.weight as *const c_void,
                plan.weight_layout,
                pointers.x as *const c_void,
                plan.x_layout,
                pointers.out as *const c_void,
                plan.out_layout,
                pointers.out as *mut c_void,
                plan.out_layout,
                &plan.algorithm,
                self.workspace as *mut c_void,
                WORKSPACE_BYTES,
                stream as lt_sys::cudaStream_t,
            )
        }
        .map_err(blas_error("launching a GEMM"))
    }

    /// Descriptors and the heuristic's first algorithm for `shape`, in
    /// cuBLASLt's column-major terms: `outᵀ[n, m] = weightᵀᵀ · xᵀ`, i.e. A
    /// is the weight (stored k × n, transposed), B is x (k × m), D is
    /// out (n × m): the "TN" layout tensor-core kernels serve best.
    fn make_plan(&self, shape: GemmShape) -> Result<GemmPlan> {
        let GemmShape { dtype, m, n, k } = shape;
        let element = match dtype {
            DType::F32 => lt_sys::cudaDataType_t::CUDA_R_32F,
            DType::F16 => lt_sys::cudaDataType_t::CUDA_R_16F,
            DType::BF16 => lt_sys::cudaDataType_t::CUDA_R_16BF,
            other => {
                return Err(Error::KernelFailed {
                    kernel: "gemm".into(),
                    message: format!("cuBLASLt GEMM of {other} is not supported (f32, f16, bf16 are)"),
                });
            }
        };
        let (m, n, k) = (u64::from(m), u64::from(n), u64::from(k));
        let description = lt::create_matmul_desc(
            lt_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
            lt_sys::cudaDataType_t::CUDA_R_32F,
        )
        .map_err(blas_error("creating a matmul description"))?;
        let mut plan = GemmPlan {
            description,
            weight_layout: std::ptr::null_mut(),
            x_layout: std::ptr::null_mut(),
            out_layout: std::ptr::null_mut(),
            algorithm: lt_sys::cublasLtMatmulAlgo_t { data: [0; 8] },
            kernels: 1,
        };
        // cublasOperation_t's CUBLAS_OP_T (cudarc's cuBLASLt bindings leave
        // the enum to cuBLAS's): a 32-bit integer.
        let transpose: i32 = 1;
        // SAFETY: the attribute's value is a cublasOperation_t, 32 bits.
        unsafe {
            lt::set_matmul_desc_attribute(
                description,
                lt_sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                (&transpose as *const i32).cast(),
                size_of::<i32>(),
            )
        }
        .map_err(blas_error("setting a matmul description's transpose"))?;
        plan.weight_layout =
            lt::create_matrix_layout(element, k, n, k as i64).map_err(blas_error("creating a layout"))?;
        plan.x_layout =
            lt::create_matrix_layout(element, k, m, k as i64).map_err(blas_error("creating a layout"))?;
        plan.out_layout = lt::create_matrix_layout(lt_sys::cudaDataType_t::CUDA_R_32F, n, m, n as i64)
            .map_err(blas_error("creating a layout"))?;
        plan.algorithm = self.heuristic(&plan)?;
        Ok(plan)
    }

    /// The heuristic's first algorithm for the plan's descriptors, within
    /// our workspace and pointer alignment.
    fn heuristic(&self, plan: &GemmPlan) -> Result<lt_sys::cublasLtMatmulAlgo_t> {
        let preference = lt::create_matmul_pref().map_err(blas_error("creating a preference"))?;
        let set = |attribute, value: *const c_void, size| {
            // SAFETY: each value below is of the attribute's documented type and size.
            unsafe { lt::set_matmul_pref_attribute(preference, attribute, value, size) }
        };
        use lt_sys::cublasLtMatmulPreferenceAttributes_t as Attribute;
        let workspace = WORKSPACE_BYTES as u64;
        let mut outcome = set(
            Attribute::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            (&workspace as *const u64).cast(),
            size_of::<u64>(),
        );
        for attribute in [
            Attribute::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
            Attribute::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            Attribute::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
            Attribute::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
        ] {
            outcome = outcome.and_then(|()| {
                set(
                    attribute,
                    (&POINTER_ALIGNMENT as *const u32).cast(),
                    size_of::<u32>(),
                )
            });
        }
        let result = outcome
            .map_err(blas_error("setting a preference"))
            .and_then(|()| {
                let mut found = MaybeUninit::<lt_sys::cublasLtMatmulHeuristicResult_t>::uninit();
                let mut count = 0;
                // SAFETY: the descriptors are alive; one result is written at most.
                unsafe {
                    lt_sys::cublasLtMatmulAlgoGetHeuristic(
                        self.handle,
                        plan.description,
                        plan.weight_layout,
                        plan.x_layout,
                        plan.out_layout,
                        plan.out_layout,
                        preference,
                        1,
                        found.as_mut_ptr(),
                        &mut count,
                    )
                }
                .result()
                .map_err(blas_error("choosing an algorithm"))?;
                if count == 0 {
                    return Err(Error::Blas {
                        operation: "choosing an algorithm (none fits)".into(),
                        source: CublasError(lt_sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED),
                    });
                }
                // SAFETY: cuBLASLt wrote one result (count is 1).
                let found = unsafe { found.assume_init() };
                found
                    .state
                    .result()
                    .map_err(blas_error("choosing an algorithm"))?;
                Ok(found.algo)
            });
        // SAFETY: created above, destroyed once.
        let _ = unsafe { lt::destroy_matmul_pref(preference) };
        result
    }

    /// How many kernels one call of `plan` launches: the call is captured
    /// into a graph on the side stream (nothing runs) and its kernel nodes
    /// counted.
    fn count_kernels(&self, plan: &GemmPlan, pointers: GemmPointers) -> Result<u32> {
        let stream = self.side_stream.cu_stream();
        // SAFETY: our side stream, idle; relaxed mode leaves other threads'
        // and streams' work alone.
        unsafe {
            driver_result::stream::begin_capture(
                stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        }
        .map_err(driver_error("beginning a capture to count a GEMM's kernels"))?;
        let launched = self.launch(plan, pointers, stream);
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above, on every path.
        let ended = unsafe { sys::cuStreamEndCapture(stream, &mut graph) }.result();
        launched?;
        ended.map_err(driver_error("ending a capture to count a GEMM's kernels"))?;
        let counted = count_kernel_nodes(graph);
        // SAFETY: the graph was made by the capture and is not used after.
        unsafe { sys::cuGraphDestroy(graph) };
        counted
    }
}

/// The kernel nodes of `graph`.
fn count_kernel_nodes(graph: sys::CUgraph) -> Result<u32> {
    let mut count = 0usize;
    // SAFETY: asks for the node count only.
    unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut count) }
        .result()
        .map_err(driver_error("listing a graph's nodes"))?;
    let mut nodes = vec![std::ptr::null_mut(); count];
    // SAFETY: room for `count` nodes.
    unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count) }
        .result()
        .map_err(driver_error("listing a graph's nodes"))?;
    let mut kernels = 0;
    for node in nodes.into_iter().take(count) {
        let mut kind = MaybeUninit::<sys::CUgraphNodeType>::uninit();
        // SAFETY: a node of the graph; one value written.
        unsafe { sys::cuGraphNodeGetType(node, kind.as_mut_ptr()) }
            .result()
            .map_err(driver_error("reading a graph node's type"))?;
        // SAFETY: written by the successful call above.
        if unsafe { kind.assume_init() } == sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
            kernels += 1;
        }
    }
    Ok(kernels)
}
