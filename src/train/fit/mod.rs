//! `compnet fit`: one trainer with steppers, schedules and hooks, fed by data iterators that
//! read egs archives or cut Kaldi feature archives into examples.
//!
//! Data flow: `data` (archives → examples → seeded minibatches on a loader thread) →
//! `fit_loop` (forward, objective, backward into the stepper's target, step) using `stepper`
//! (plain-gradient steppers and Kaldi's natural-gradient SGD), `schedule` (learning rate,
//! minibatch size, decay, warm-up, dropout) and `hooks` (metrics, checkpoints, stoppers,
//! curves).

pub mod data;
pub mod fit_loop;
pub mod hooks;
pub mod ng_state;
pub mod schedule;
pub mod stepper;

pub use fit_loop::{evaluate, fit, fit_parallel, FitOptions, FitSummary};
