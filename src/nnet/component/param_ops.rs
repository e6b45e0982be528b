//! Operations on component parameters: the algebra of `UpdatableComponent` (parameter blocks,
//! add, scale, dot product, perturb) over vectors and (W, b) pairs, and the macros that implement
//! the `Component` and `UpdatableComponent` boilerplate from them.

use super::param_init::{gaussian_matrix, gaussian_vector};
use crate::matrix::{Matrix, Trans, Vector};
use rand::RngCore;

/// `self += alpha · other` for vectors of equal length.
pub fn vec_add(v: &mut Vector, alpha: f32, other: &Vector) {
    if v.dim() == other.dim() {
        v.as_row_mut().add_mat(alpha, other.as_row(), Trans::No);
    }
}

/// Dot product of two parameter vectors (accumulated in f64; 0 when the dimensions differ).
pub fn vector_dot(a: &Vector, b: &Vector) -> f32 {
    if a.dim() != b.dim() {
        return 0.0;
    }
    a.as_row().trace_mat_mat(b.as_row())
}

/// Adds Gaussian noise of standard deviation `stddev` to a matrix.
pub fn perturb_matrix(m: &mut Matrix, stddev: f32, rng: &mut dyn RngCore) {
    let noise = gaussian_matrix(m.num_rows(), m.num_cols(), 0.0, stddev, rng);
    m.view_mut().add_mat(1.0, noise.view(), Trans::No);
}

/// Adds Gaussian noise of standard deviation `stddev` to a vector.
pub fn perturb_vector(v: &mut Vector, stddev: f32, rng: &mut dyn RngCore) {
    let noise = gaussian_vector(v.dim(), 0.0, stddev, rng);
    vec_add(v, 1.0, &noise);
}

/// Implements `clone_box`, `as_any` and `as_any_mut` for a component type.
macro_rules! component_boilerplate {
    () => {
        fn clone_box(&self) -> Box<dyn $crate::nnet::component::Component> {
            Box::new(self.clone())
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
        fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
            self
        }
    };
}
pub(crate) use component_boilerplate;

/// `component_boilerplate!()` plus `set_test_mode` setting the `test_mode` field: the dropout
/// family, whose randomness is off in test mode.
macro_rules! test_mode_boilerplate {
    () => {
        $crate::nnet::component::param_ops::component_boilerplate!();
        fn set_test_mode(&mut self, test_mode: bool, _rng: &mut dyn rand::RngCore) {
            self.test_mode = test_mode;
        }
    };
}
pub(crate) use test_mode_boilerplate;

/// `component_boilerplate!()` plus `as_updatable` and `as_updatable_mut` giving the component
/// itself (for a type that implements `UpdatableComponent`); with `if cond`, only while
/// `self.cond` holds (`is-updatable=false` makes a ConstantComponent a constant).
macro_rules! updatable_boilerplate {
    () => {
        $crate::nnet::component::param_ops::component_boilerplate!();
        fn as_updatable(&self) -> Option<&dyn $crate::nnet::component::UpdatableComponent> {
            Some(self)
        }
        fn as_updatable_mut(
            &mut self,
        ) -> Option<&mut dyn $crate::nnet::component::UpdatableComponent> {
            Some(self)
        }
    };
    (if $($cond:tt)+) => {
        $crate::nnet::component::param_ops::component_boilerplate!();
        fn as_updatable(&self) -> Option<&dyn $crate::nnet::component::UpdatableComponent> {
            self.$($cond)+.then_some(self as &dyn $crate::nnet::component::UpdatableComponent)
        }
        fn as_updatable_mut(
            &mut self,
        ) -> Option<&mut dyn $crate::nnet::component::UpdatableComponent> {
            if self.$($cond)+ {
                Some(self)
            } else {
                None
            }
        }
    };
}
pub(crate) use updatable_boilerplate;

/// `common` and `common_mut` of an `UpdatableComponent` whose learning-rate options are its
/// `common` field; with `ng`, also `natural_gradient_slots` from its `ng_state` field.
macro_rules! updatable_common {
    () => {
        fn common(&self) -> &$crate::nnet::component::UpdatableCommon {
            &self.common
        }
        fn common_mut(&mut self) -> &mut $crate::nnet::component::UpdatableCommon {
            &mut self.common
        }
    };
    (ng) => {
        $crate::nnet::component::param_ops::updatable_common!();
        fn natural_gradient_slots(&mut self) -> Vec<&mut dyn $crate::gradient::NgSlot> {
            $crate::gradient::NgSlots::ng_slots(&mut self.ng_state)
        }
    };
}
pub(crate) use updatable_common;

/// Parameter algebra for a (W, b) pair: adds `alpha`·(olin, obias) when the shapes agree.
pub fn pair_add(lin: &mut Matrix, bias: &mut Vector, alpha: f32, olin: &Matrix, obias: &Vector) {
    if (olin.num_rows(), olin.num_cols()) == (lin.num_rows(), lin.num_cols()) {
        lin.view_mut()
            .add_mat(alpha, olin.view(), crate::matrix::Trans::No);
        vec_add(bias, alpha, obias);
    }
}

/// Dot product of two (W, b) pairs (0 when the shapes differ).
pub fn pair_dot(lin: &Matrix, bias: &Vector, olin: &Matrix, obias: &Vector) -> f32 {
    if (olin.num_rows(), olin.num_cols()) != (lin.num_rows(), lin.num_cols()) {
        return 0.0;
    }
    lin.view().trace_mat_mat(olin.view()) + vector_dot(bias, obias)
}

/// Implements `UpdatableComponent` for a type whose parameters are `linear` (W) and `bias`
/// (b), with its learning-rate options in `common`.
macro_rules! linear_bias_updatable {
    ($ty:ty) => {
        $crate::nnet::component::param_ops::linear_bias_updatable!($ty, {});
    };
    // `ng`: the type keeps its natural-gradient state in `ng_state` (checkpointed by fit).
    ($ty:ty, ng) => {
        $crate::nnet::component::param_ops::linear_bias_updatable!($ty, (ng), {});
    };
    // `orthonormal`: the type also has Kaldi's `orthonormal-constraint` on `linear`.
    ($ty:ty, orthonormal, ng) => {
        $crate::nnet::component::param_ops::linear_bias_updatable!($ty, (ng), {
            fn orthonormal_constraint(
                &mut self,
            ) -> Option<(f32, $crate::matrix::MatViewMut<'_>)> {
                (self.orthonormal_constraint != 0.0)
                    .then(|| (self.orthonormal_constraint, self.linear.view_mut()))
            }
        });
    };
    ($ty:ty, { $($extra:item)* }) => {
        $crate::nnet::component::param_ops::linear_bias_updatable!($ty, (), { $($extra)* });
    };
    // `$ng`: `(ng)` or `()`, what `updatable_common!` is given.
    ($ty:ty, $ng:tt, { $($extra:item)* }) => {
        impl $crate::nnet::component::UpdatableComponent for $ty {
            $($extra)*
            $crate::nnet::component::param_ops::updatable_common!$ng;
            fn num_parameters(&self) -> usize {
                self.linear.num_rows() * (self.linear.num_cols() + 1)
            }
            fn param_blocks(&self) -> Vec<$crate::matrix::MatView<'_>> {
                vec![self.linear.view(), self.bias.as_row()]
            }
            fn param_blocks_mut(&mut self) -> Vec<$crate::matrix::MatViewMut<'_>> {
                vec![self.linear.view_mut(), self.bias.as_row_mut()]
            }
            fn scale(&mut self, alpha: f32) {
                self.linear.view_mut().scale(alpha);
                self.bias.as_row_mut().scale(alpha);
            }
            fn add(&mut self, alpha: f32, other: &dyn $crate::nnet::component::Component) {
                if let Some(o) = other.as_any().downcast_ref::<$ty>() {
                    $crate::nnet::component::param_ops::pair_add(
                        &mut self.linear,
                        &mut self.bias,
                        alpha,
                        &o.linear,
                        &o.bias,
                    );
                }
            }
            fn dot_product(&self, other: &dyn $crate::nnet::component::Component) -> f32 {
                other.as_any().downcast_ref::<$ty>().map_or(0.0, |o| {
                    $crate::nnet::component::param_ops::pair_dot(
                        &self.linear,
                        &self.bias,
                        &o.linear,
                        &o.bias,
                    )
                })
            }
            fn perturb_params(&mut self, stddev: f32, rng: &mut dyn rand::RngCore) {
                $crate::nnet::component::param_ops::perturb_matrix(&mut self.linear, stddev, rng);
                $crate::nnet::component::param_ops::perturb_vector(&mut self.bias, stddev, rng);
            }
        }
    };
}
pub(crate) use linear_bias_updatable;

/// Implements `UpdatableComponent` for a type whose parameters are a list of vectors (in
/// Vectorize order), with its learning-rate options in `common`.
macro_rules! vector_params_updatable {
    ($ty:ty, $($field:ident),+) => {
        impl $crate::nnet::component::UpdatableComponent for $ty {
            $crate::nnet::component::param_ops::updatable_common!(ng);
            fn num_parameters(&self) -> usize {
                0 $(+ self.$field.dim())+
            }
            fn param_blocks(&self) -> Vec<$crate::matrix::MatView<'_>> {
                vec![$(self.$field.as_row()),+]
            }
            fn param_blocks_mut(&mut self) -> Vec<$crate::matrix::MatViewMut<'_>> {
                vec![$(self.$field.as_row_mut()),+]
            }
            fn scale(&mut self, alpha: f32) {
                $(self.$field.scale(alpha);)+
            }
            fn add(&mut self, alpha: f32, other: &dyn $crate::nnet::component::Component) {
                if let Some(o) = other.as_any().downcast_ref::<$ty>() {
                    $($crate::nnet::component::param_ops::vec_add(
                        &mut self.$field,
                        alpha,
                        &o.$field,
                    );)+
                }
            }
            fn dot_product(&self, other: &dyn $crate::nnet::component::Component) -> f32 {
                match other.as_any().downcast_ref::<$ty>() {
                    Some(o) => {
                        0.0 $(+ $crate::nnet::component::param_ops::vector_dot(&self.$field, &o.$field))+
                    }
                    None => 0.0,
                }
            }
            fn perturb_params(&mut self, stddev: f32, rng: &mut dyn rand::RngCore) {
                $($crate::nnet::component::param_ops::perturb_vector(&mut self.$field, stddev, rng);)+
            }
        }
    };
}
pub(crate) use vector_params_updatable;
