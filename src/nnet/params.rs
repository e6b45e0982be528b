//! Parameter maths over a whole network: counting parameters, setting learning rates and
//! scaling, and switching it to test mode (Kaldi's nnet-utils functions the trainer and `nnet3-copy` use).

use crate::nnet::component::Properties;
use crate::nnet::network::Nnet;

impl Nnet {
    /// Puts the components that keep batch statistics (BatchNorm) and/or the random ones
    /// (the dropout family) in test mode (Kaldi's `SetBatchnormTestMode` and
    /// `SetDropoutTestMode`), one generator seeded by `srand` through all of them in order.
    pub fn set_test_modes(&mut self, batchnorm: bool, dropout: bool, srand: u64) {
        let mut rng = crate::random::seeded_rng(srand);
        for c in &mut self.components {
            let p = c.properties();
            if (batchnorm && p.has(Properties::BATCH_STATISTICS))
                || (dropout && p.has(Properties::RANDOM_COMPONENT))
            {
                c.set_test_mode(true, &mut rng);
            }
        }
    }

    /// Total number of trainable parameters (updatable components only), as `nnet3-info`.
    pub fn num_parameters(&self) -> usize {
        self.components
            .iter()
            .filter_map(|c| c.as_updatable())
            .map(|u| u.num_parameters())
            .sum()
    }

    /// Sets the learning rate of every updatable component (Kaldi's `SetLearningRate`: the
    /// stored rate is `learning_rate * learning-rate-factor`).
    pub fn set_learning_rate(&mut self, learning_rate: f32) {
        for c in &mut self.components {
            if let Some(u) = c.as_updatable_mut() {
                u.set_underlying_learning_rate(learning_rate);
            }
        }
    }

    /// Multiplies all parameters by `scale` (Kaldi's `ScaleNnet`); components without
    /// parameters scale their stored statistics instead.
    pub fn scale_all(&mut self, scale: f32) {
        if scale == 1.0 {
            return;
        }
        for c in &mut self.components {
            if let Some(u) = c.as_updatable_mut() {
                u.scale(scale);
            } else {
                c.scale_stats(scale);
            }
        }
    }

    /// Turns 8-bit integer forward products on (or off) in every component of the affine
    /// family (`compute --quantize=int8`, see `matrix::int8`); returns how many weight
    /// matrices were switched. Everything else, and every backward product, stays in floats.
    pub fn set_int8_inference(&mut self, on: bool) -> usize {
        let mut n = 0;
        for c in &mut self.components {
            for w in c.product_weights_mut() {
                w.set_int8(on);
                n += 1;
            }
        }
        n
    }
}
