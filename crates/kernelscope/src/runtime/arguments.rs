//! A kernel's argument list, declared once with [`kernel_arguments!`]: the
//! names and kinds in order, and a position constant per argument. Ops
//! build their dispatches by it ([`Arguments`]), CPU references and the
//! backends read arguments by its positions, and the ops' tests check every
//! `.cu` signature against it. Here, below the backends, so that the
//! arguments of work the runtime itself reads (a library GEMM, the
//! collectives) are declared in one list too.

use super::{Access, Buffer, Dispatch, Kernel, Param};
use crate::error::{Error, Result};

/// How a kernel takes one argument; the CUDA signature spells it as
/// `const T*`, `T*` or the scalar's C type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ArgumentKind {
    /// A buffer the kernel only reads (`const T*`).
    Read,
    /// A buffer the kernel only writes (`T*`).
    Write,
    /// A buffer the kernel updates in place (`T*`).
    ReadWrite,
    /// `u32` (`unsigned int`).
    U32,
    /// `float`.
    F32,
    /// `unsigned long long`.
    U64,
}

/// One declared kernel argument: its name in the `.cu` signature and its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Argument {
    /// The parameter's name in the CUDA signature.
    pub(crate) name: &'static str,
    /// How the kernel takes it.
    pub(crate) kind: ArgumentKind,
}

/// Declares an op's kernel arguments in order, once: `ARGUMENTS` (the list
/// the launch and the signature test follow) and one position constant per
/// argument (what the launch and the CPU reference index with).
///
/// ```text
/// kernel_arguments! { X: "x" Read, OUT: "out" Write, N: "n" U32 }
/// ```
macro_rules! kernel_arguments {
    ($($position:ident: $name:literal $kind:ident),+ $(,)?) => {
        /// The kernel's arguments in order: the one list its launch, its CPU
        /// reference and its `.cu` signature follow.
        pub(crate) const ARGUMENTS: &[$crate::runtime::arguments::Argument] = &[$($crate::runtime::arguments::Argument {
            name: $name,
            kind: $crate::runtime::arguments::ArgumentKind::$kind,
        }),+];
        // A list longer than a dispatch holds fails here, at build time,
        // not at its first launch on a GPU.
        const _: () = assert!(
            ARGUMENTS.len() <= $crate::runtime::arguments::MAX_ARGUMENTS,
            "a kernel declares more arguments than runtime::arguments::MAX_ARGUMENTS"
        );
        $crate::runtime::arguments::kernel_arguments!(@positions 0usize; $($position $name),+);
    };
    (@positions $index:expr; $position:ident $name:literal $(, $rest:ident $rest_name:literal)*) => {
        #[doc = concat!("Position of `", $name, "` among the kernel's arguments.")]
        pub(crate) const $position: usize = $index;
        $crate::runtime::arguments::kernel_arguments!(@positions $index + 1; $($rest $rest_name),*);
    };
    (@positions $index:expr;) => {};
}
pub(crate) use kernel_arguments;

/// The most arguments any op's kernel takes (q/k/v's products with RoPE
/// and the append take 20); `kernel_arguments!` refuses a longer list at
/// build time.
pub(crate) const MAX_ARGUMENTS: usize = 24;

/// A value given for one argument.
#[derive(Clone, Copy)]
enum Value<'a> {
    Buffer(&'a Buffer),
    Scalar(Param),
}

/// An op's dispatch arguments, each placed by its declared position, so the
/// order of the calls that fill it does not matter; the access of a buffer
/// comes from the declaration.
pub(crate) struct Arguments<'a> {
    declared: &'static [Argument],
    values: [Option<Value<'a>>; MAX_ARGUMENTS],
}

impl<'a> Arguments<'a> {
    /// No values yet for the arguments `declared`.
    pub(crate) fn new(declared: &'static [Argument]) -> Self {
        Arguments {
            declared,
            values: [None; MAX_ARGUMENTS],
        }
    }

    /// The buffer at `position`.
    pub(crate) fn buffer(mut self, position: usize, buffer: &'a Buffer) -> Self {
        if let Some(value) = self.values.get_mut(position) {
            *value = Some(Value::Buffer(buffer));
        }
        self
    }

    /// The scalar at `position`.
    pub(crate) fn scalar(mut self, position: usize, value: impl Into<Param>) -> Self {
        if let Some(slot) = self.values.get_mut(position) {
            *slot = Some(Value::Scalar(value.into()));
        }
        self
    }

    /// A dispatch of `kernel` with the arguments in declared order. A value
    /// missing or of the wrong kind is a bug in the op, reported as
    /// [`Error::KernelArgument`] rather than launched.
    pub(crate) fn dispatch(self, kernel: &Kernel) -> Result<Dispatch> {
        let problem = |index: usize, problem: String| Error::KernelArgument {
            kernel: kernel.name().to_string(),
            index,
            problem,
        };
        if self.declared.len() > MAX_ARGUMENTS {
            return Err(problem(
                MAX_ARGUMENTS,
                format!("more than {MAX_ARGUMENTS} arguments declared"),
            ));
        }
        let mut dispatch = Dispatch::new(kernel);
        for (index, (argument, value)) in self.declared.iter().zip(self.values).enumerate() {
            dispatch = match (argument.kind, value) {
                (ArgumentKind::Read, Some(Value::Buffer(buffer))) => dispatch.buffer(buffer, Access::Read),
                (ArgumentKind::Write, Some(Value::Buffer(buffer))) => dispatch.buffer(buffer, Access::Write),
                (ArgumentKind::ReadWrite, Some(Value::Buffer(buffer))) => {
                    dispatch.buffer(buffer, Access::ReadWrite)
                }
                (ArgumentKind::U32, Some(Value::Scalar(value @ Param::U32(_))))
                | (ArgumentKind::F32, Some(Value::Scalar(value @ Param::F32(_))))
                | (ArgumentKind::U64, Some(Value::Scalar(value @ Param::U64(_)))) => dispatch.param(value),
                (kind, None) => {
                    return Err(problem(
                        index,
                        format!("`{}` ({kind:?}) was not given", argument.name),
                    ));
                }
                (kind, Some(_)) => {
                    return Err(problem(
                        index,
                        format!("`{}` is declared {kind:?} but given another kind", argument.name),
                    ));
                }
            };
        }
        if let Some(extra) = self.values[self.declared.len()..]
            .iter()
            .position(Option::is_some)
        {
            return Err(problem(
                self.declared.len() + extra,
                "given but not declared".into(),
            ));
        }
        Ok(dispatch)
    }
}

/// Asserts that `list` is `base` in order, then arguments named `rest`: a
/// kernel whose dispatch fills `base`'s positions (the streamed and staging
/// variants of a product) must take those arguments first.
#[cfg(test)]
pub(crate) fn assert_extends(list: &[Argument], base: &[Argument], rest: &[&str]) {
    assert!(list.len() >= base.len(), "shorter than the list it extends");
    assert_eq!(&list[..base.len()], base, "the first arguments");
    let names: Vec<&str> = list[base.len()..].iter().map(|argument| argument.name).collect();
    assert_eq!(names, rest, "the arguments after them");
}
