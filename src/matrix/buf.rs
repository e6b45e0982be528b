//! The storage under `Matrix` and `Vector`, and where a view's elements live.
//!
//! Without the `cuda` feature the storage is a plain `Vec` and `Place` is zero-sized, so the
//! default build is exactly the host code. With it, the storage is host memory or CUDA managed
//! memory (`cuda_buf`), chosen when it is allocated: device memory once a GPU has been
//! selected (`device::select`), as Kaldi's CuMatrix allocates on the GPU once `CuDevice` has
//! one. Managed memory is also readable by the host, so an operation without a kernel still
//! runs, on the host, over the same elements.

use super::Real;

#[cfg(not(feature = "cuda"))]
pub(in crate::matrix) type Buf<T> = Vec<T>;
#[cfg(feature = "cuda")]
pub(in crate::matrix) use super::cuda_buf::Buf;

/// `n` zeros, on the device when one is selected.
pub(in crate::matrix) fn zeroed(n: usize) -> Buf<Real> {
    #[cfg(feature = "cuda")]
    return Buf::zeroed(n);
    #[cfg(not(feature = "cuda"))]
    vec![0.0; n]
}

/// Storage holding `v` (copied to the device when one is selected).
pub(in crate::matrix) fn from_vec(v: Vec<Real>) -> Buf<Real> {
    #[cfg(feature = "cuda")]
    return Buf::from_vec(v);
    #[cfg(not(feature = "cuda"))]
    v
}

/// Storage holding `v` in host memory whatever the device (small host-side bookkeeping).
pub(in crate::matrix) fn host(v: Vec<Real>) -> Buf<Real> {
    #[cfg(feature = "cuda")]
    return Buf::Host(v);
    #[cfg(not(feature = "cuda"))]
    v
}

/// The elements, for building views (which wait for queued GPU work themselves, in their host
/// accessors): no wait here.
#[inline(always)]
pub(in crate::matrix) fn lazy(b: &Buf<Real>) -> &[Real] {
    #[cfg(feature = "cuda")]
    return b.lazy();
    #[cfg(not(feature = "cuda"))]
    b
}

/// As [`lazy`], mutable.
#[inline(always)]
pub(in crate::matrix) fn lazy_mut(b: &mut Buf<Real>) -> &mut [Real] {
    #[cfg(feature = "cuda")]
    return b.lazy_mut();
    #[cfg(not(feature = "cuda"))]
    b
}

/// The elements as a host `Vec` (a copy when they live on the device).
pub(in crate::matrix) fn into_vec(b: Buf<Real>) -> Vec<Real> {
    #[cfg(feature = "cuda")]
    return b.into_vec();
    #[cfg(not(feature = "cuda"))]
    b
}

/// Where a view's elements live: always the host without the `cuda` feature (then this is
/// zero-sized and every device branch is compiled out).
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub(in crate::matrix) struct Place {
    #[cfg(feature = "cuda")]
    device: bool,
}

impl Place {
    /// Host memory (views made from host slices).
    pub(in crate::matrix) const HOST: Place = Place {
        #[cfg(feature = "cuda")]
        device: false,
    };
    /// Where `b`'s elements live.
    #[allow(unused_variables)]
    pub(in crate::matrix) fn of(b: &Buf<Real>) -> Place {
        Place {
            #[cfg(feature = "cuda")]
            device: b.is_device(),
        }
    }
    /// Waits for queued GPU work before host code touches elements living here (nothing for
    /// host memory, or when GPU calls wait for themselves: see `cuda::settle`).
    #[inline(always)]
    pub(in crate::matrix) fn settle(self) {
        #[cfg(feature = "cuda")]
        if self.device {
            super::cuda::settle();
        }
    }
    /// True for device memory.
    #[inline]
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(in crate::matrix) fn on_device(self) -> bool {
        #[cfg(feature = "cuda")]
        return self.device;
        #[cfg(not(feature = "cuda"))]
        false
    }
}

/// Runs `$body` and returns its value from the enclosing function when the CUDA build has
/// every operand (`$cond`) on the device; else waits for queued GPU work (some operand may
/// still live there) before the host code that follows. Compiled out without the `cuda`
/// feature, so the host code is the whole function there.
macro_rules! on_device {
    ($cond:expr => $body:expr) => {
        #[cfg(feature = "cuda")]
        {
            if $cond {
                #[allow(clippy::unit_arg)]
                return $body;
            }
            $crate::matrix::cuda::settle();
        }
    };
}
pub(in crate::matrix) use on_device;
