//! `Buf`, the storage of a `Matrix` or `Vector` in a CUDA build: a host `Vec`, or a managed
//! buffer from the GPU's pool. Both dereference to a slice (managed memory is host-readable
//! between operations; the dereference first waits for queued GPU work, `cuda::settle`), so
//! host code reads either. Views are built from `lazy`, which does not wait: their own host
//! accessors do.

use super::cuda::gpu;
use std::ops::{Deref, DerefMut};

/// Host or managed storage of `T`s.
pub(in crate::matrix) enum Buf<T: Copy + Default + 'static> {
    /// Host memory.
    Host(Vec<T>),
    /// Managed memory: `len` elements in use of `class` bytes at `ptr`.
    Managed { ptr: u64, len: usize, class: usize },
}

// SAFETY: a managed buffer is plain memory owned by this value alone; host access from any
// thread first waits for the GPU work queued on it (`cuda::settle`, process-wide), so moving
// or sharing it between threads is as safe as for a Vec.
unsafe impl<T: Copy + Default + Send> Send for Buf<T> {}
// SAFETY: as above; shared access only reads.
unsafe impl<T: Copy + Default + Sync> Sync for Buf<T> {}

impl<T: Copy + Default + 'static> Buf<T> {
    const SIZE: usize = std::mem::size_of::<T>();

    /// `n` zeros, on the GPU when one is selected.
    pub fn zeroed(n: usize) -> Self {
        if !super::cuda::selected() {
            return Buf::Host(vec![T::default(); n]);
        }
        let (ptr, class) = gpu().alloc(n * Self::SIZE);
        gpu().zero(ptr, n * Self::SIZE);
        Buf::Managed { ptr, len: n, class }
    }

    /// Storage holding `v` (copied to managed memory when a GPU is selected).
    pub fn from_vec(v: Vec<T>) -> Self {
        if !super::cuda::selected() || v.is_empty() {
            return Buf::Host(v);
        }
        // A copy by the driver: written through the host, the pages would move to the host
        // and back at the first kernel.
        let (ptr, class) = gpu().alloc(v.len() * Self::SIZE);
        gpu().upload(ptr, &v);
        Buf::Managed {
            ptr,
            len: v.len(),
            class,
        }
    }

    /// The elements as a host `Vec`.
    pub fn into_vec(mut self) -> Vec<T> {
        match self {
            Buf::Host(ref mut v) => std::mem::take(v),
            Buf::Managed { ptr, len, .. } => gpu().download(ptr, len),
        }
    }

    /// Number of elements (without the wait of a dereference).
    pub fn len(&self) -> usize {
        match self {
            Buf::Host(v) => v.len(),
            Buf::Managed { len, .. } => *len,
        }
    }

    /// The elements as a slice without waiting for queued GPU work: for views, whose host
    /// accessors wait, and for the address a kernel is given.
    pub fn lazy(&self) -> &[T] {
        match self {
            Buf::Host(v) => v,
            Buf::Managed { len: 0, .. } => &[],
            // SAFETY: `ptr` is a managed buffer holding `len` initialised elements; the host
            // reads them only after `settle` (views' accessors, `Deref`).
            Buf::Managed { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts(*ptr as *const T, *len)
            },
        }
    }

    /// As `lazy`, mutable.
    pub fn lazy_mut(&mut self) -> &mut [T] {
        match self {
            Buf::Host(v) => v,
            Buf::Managed { len: 0, .. } => &mut [],
            // SAFETY: as for `lazy`, and `&mut self` makes the access unique.
            Buf::Managed { ptr, len, .. } => unsafe {
                std::slice::from_raw_parts_mut(*ptr as *mut T, *len)
            },
        }
    }

    /// The address of the first element, without waiting (for a kernel's argument).
    pub fn as_ptr(&self) -> *const T {
        self.lazy().as_ptr()
    }

    /// True for managed (device) memory.
    pub fn is_device(&self) -> bool {
        matches!(self, Buf::Managed { .. })
    }

    /// Elements the buffer holds without reallocating.
    pub fn capacity(&self) -> usize {
        match self {
            Buf::Host(v) => v.capacity(),
            Buf::Managed { class, .. } => class / Self::SIZE,
        }
    }

    /// Keeps the first `n` elements.
    pub fn truncate(&mut self, n: usize) {
        match self {
            Buf::Host(v) => v.truncate(n),
            Buf::Managed { len, .. } => *len = (*len).min(n),
        }
    }

    /// Drops every element (keeps the memory).
    pub fn clear(&mut self) {
        self.truncate(0);
    }

    /// Grows to `n` elements without writing any, where the memory already holds them
    /// (`n` ≤ what was written before, which the caller vouches for); else as `resize`.
    pub fn grow_within(&mut self, n: usize)
    where
        T: PartialEq,
    {
        match self {
            Buf::Managed { len, class, .. } if n * Self::SIZE <= *class => *len = (*len).max(n),
            Buf::Host(v) if n <= v.capacity() => {
                let old = v.len();
                if n > old {
                    // SAFETY: within capacity, and the caller vouches that the elements up to
                    // `n` were written before (a truncation leaves them in place).
                    unsafe { v.set_len(n) }
                }
            }
            _ => self.resize(n, T::default()),
        }
    }

    /// Grows or shrinks to `n` elements, new ones set to `value`.
    pub fn resize(&mut self, n: usize, value: T)
    where
        T: PartialEq,
    {
        let (ptr, len, class) = match self {
            // A matrix made empty (`Matrix::default()`) and sized later goes where new
            // storage goes.
            Buf::Host(v) if v.is_empty() && n > 0 && super::cuda::selected() => {
                *self = Buf::zeroed(n);
                if value != T::default() {
                    self.fill(value);
                }
                return;
            }
            Buf::Host(v) => return v.resize(n, value),
            Buf::Managed { ptr, len, class } => (*ptr, *len, *class),
        };
        if n <= len {
            self.truncate(n);
            return;
        }
        if n * Self::SIZE > class {
            let (p2, c2) = gpu().alloc(n * Self::SIZE);
            if len > 0 {
                gpu().copy(p2, ptr, len * Self::SIZE);
            }
            // Assigning drops the old buffer, which gives it back to the pool.
            *self = Buf::Managed {
                ptr: p2,
                len,
                class: c2,
            };
        }
        let Buf::Managed { ptr, len: l, .. } = self else {
            unreachable!("managed above")
        };
        let (ptr, old) = (*ptr, *l);
        *l = n;
        if value == T::default() {
            gpu().zero(ptr + (old * Self::SIZE) as u64, (n - old) * Self::SIZE);
        } else {
            self[old..].fill(value);
        }
    }
}

impl<T: Copy + Default + 'static> Deref for Buf<T> {
    type Target = [T];
    /// The elements for host code: waits for queued GPU work first when they are managed.
    fn deref(&self) -> &[T] {
        if self.is_device() {
            super::cuda::settle();
        }
        self.lazy()
    }
}

impl<T: Copy + Default + 'static> DerefMut for Buf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        if self.is_device() {
            super::cuda::settle();
        }
        self.lazy_mut()
    }
}

impl<T: Copy + Default + 'static> Drop for Buf<T> {
    fn drop(&mut self) {
        if let Buf::Managed { ptr, class, .. } = *self {
            gpu().free(ptr, class);
        }
    }
}

impl<T: Copy + Default + 'static> Clone for Buf<T> {
    fn clone(&self) -> Self {
        match self {
            Buf::Host(v) => Buf::Host(v.clone()),
            Buf::Managed { ptr, len, .. } => {
                let (p2, class) = gpu().alloc(len * Self::SIZE);
                if *len > 0 {
                    gpu().copy(p2, *ptr, len * Self::SIZE);
                }
                Buf::Managed {
                    ptr: p2,
                    len: *len,
                    class,
                }
            }
        }
    }
}

impl<T: Copy + Default + PartialEq + 'static> PartialEq for Buf<T> {
    fn eq(&self, other: &Self) -> bool {
        self[..] == other[..]
    }
}

impl<T: Copy + Default + 'static> Default for Buf<T> {
    fn default() -> Self {
        Buf::Host(Vec::new())
    }
}

impl<'a, T: Copy + Default + 'static> IntoIterator for &'a Buf<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a, T: Copy + Default + 'static> IntoIterator for &'a mut Buf<T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}
