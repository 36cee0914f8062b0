//! A kernel handle: a registered name, the format it was declared to read,
//! and what one backend made ready from it. Handles come from
//! [`KernelRegistry::kernel`](super::KernelRegistry::kernel) for one device;
//! only the backend that made the inside looks at it. The format rides on
//! the handle so that every dispatch of the kernel records it without the
//! op that encodes the dispatch having to say it again.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

/// A kernel made ready by a backend, in the backend's own type (a CPU
/// function, a loaded CUDA function).
pub(crate) type LoadedKernel = Arc<dyn Any + Send + Sync>;

struct KernelInner {
    name: Arc<str>,
    format: Option<Arc<str>>,
    loaded: LoadedKernel,
}

/// A kernel ready to dispatch on one backend (cheap to clone).
#[derive(Clone)]
pub struct Kernel(Arc<KernelInner>);

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kernel({})", self.0.name)
    }
}

impl Kernel {
    pub(crate) fn new(name: &str, format: Option<Arc<str>>, loaded: LoadedKernel) -> Self {
        Kernel(Arc::new(KernelInner {
            name: Arc::from(name),
            format,
            loaded,
        }))
    }

    /// The registered name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub(crate) fn shared_name(&self) -> Arc<str> {
        self.0.name.clone()
    }

    /// The format of the weights or data it reads, as registered
    /// ([`KernelRegistry::register_format`](super::KernelRegistry::register_format)):
    /// `q4_k`, `bf16`; none where none was declared.
    pub fn format(&self) -> Option<&str> {
        self.0.format.as_deref()
    }

    pub(crate) fn shared_format(&self) -> Option<Arc<str>> {
        self.0.format.clone()
    }

    /// The backend's own form of the kernel, when it is of type `T` (a
    /// handle made for another backend is not).
    pub(crate) fn loaded<T: 'static>(&self) -> Option<&T> {
        self.0.loaded.downcast_ref::<T>()
    }
}
