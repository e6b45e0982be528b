//! What the processes of a training job do together: [`Collective`], the element-wise sum
//! over the ranks of a matrix-library vector, with one process ([`OneProcess`]) and MPI's
//! world communicator (`MpiGroup`, the `mpi` cargo feature) as transports. The wire is the
//! one place a vector is copied to host memory for the sum and back. `train::parallel` says
//! what is summed and when.

use crate::error::Result;
use crate::matrix::{Vector, Vector64};

/// What the processes of a job do together. Every call is collective: all ranks make it, in
/// the same order, with vectors of the same dimension.
pub trait Collective {
    /// This process's rank, 0..size.
    fn rank(&self) -> usize;
    /// The number of processes.
    fn size(&self) -> usize;
    /// Replaces `v` by its element-wise sum over the ranks.
    fn sum(&mut self, v: &mut Vector) -> Result<()>;
    /// Replaces `v` by its element-wise sum over the ranks, in double precision.
    fn sum64(&mut self, v: &mut Vector64) -> Result<()>;
    /// Ends every process of the job with exit status `code`.
    fn abort(&self, code: i32) -> !;
}

/// One process: every sum is the vector itself.
pub struct OneProcess;

impl Collective for OneProcess {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn sum(&mut self, _v: &mut Vector) -> Result<()> {
        Ok(())
    }
    fn sum64(&mut self, _v: &mut Vector64) -> Result<()> {
        Ok(())
    }
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

#[cfg(feature = "mpi")]
pub use mpi_group::MpiGroup;

#[cfg(feature = "mpi")]
mod mpi_group {
    use super::Collective;
    use crate::error::{Error, Result};
    use crate::matrix::{Vector, Vector64};
    use mpi::collective::SystemOperation;
    use mpi::datatype::Equivalence;
    use mpi::topology::{Communicator, SimpleCommunicator};
    use mpi::traits::CommunicatorCollectives;

    /// MPI's world communicator; MPI is finalised when this is dropped.
    pub struct MpiGroup {
        world: SimpleCommunicator,
        /// The host buffers the sums arrive in, kept between calls (each call's sent storage
        /// becomes the next call's buffer, so no call allocates once they have grown).
        spare32: Vec<f32>,
        spare64: Vec<f64>,
        _universe: mpi::environment::Universe,
    }

    impl MpiGroup {
        pub fn init() -> Result<Self> {
            let universe = mpi::initialize().ok_or_else(|| {
                Error::Usage("MPI could not be initialised (or was already)".into())
            })?;
            let world = universe.world();
            Ok(MpiGroup {
                world,
                spare32: Vec::new(),
                spare64: Vec::new(),
                _universe: universe,
            })
        }
    }

    /// The element-wise sum of `send` over the ranks (the wire's host copy), received into
    /// `spare`'s storage; `send`'s storage is left in `spare` for the next call.
    fn all_reduce_sum<T: Equivalence + Copy + Default>(
        world: &SimpleCommunicator,
        send: Vec<T>,
        spare: &mut Vec<T>,
    ) -> Vec<T> {
        let mut recv = std::mem::replace(spare, send);
        recv.clear();
        recv.resize(spare.len(), T::default());
        world.all_reduce_into(&spare[..], &mut recv[..], SystemOperation::sum());
        recv
    }

    impl Collective for MpiGroup {
        fn rank(&self) -> usize {
            self.world.rank() as usize
        }
        fn size(&self) -> usize {
            self.world.size() as usize
        }
        fn sum(&mut self, v: &mut Vector) -> Result<()> {
            let send = std::mem::take(v).into_vec();
            *v = Vector::from_vec(all_reduce_sum(&self.world, send, &mut self.spare32));
            Ok(())
        }
        fn sum64(&mut self, v: &mut Vector64) -> Result<()> {
            let send = std::mem::take(v).into_vec();
            *v = Vector64::from_vec(all_reduce_sum(&self.world, send, &mut self.spare64));
            Ok(())
        }
        fn abort(&self, code: i32) -> ! {
            self.world.abort(code)
        }
    }
}
