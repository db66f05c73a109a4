//! Learning-rate schedules, computed on the CPU once per optimizer step.

/// The shape after the warmup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decay {
    /// Half a cosine from the peak down to the floor at the last step.
    Cosine,
    /// The peak until the end.
    Constant,
}

/// Why a schedule's numbers are refused; each variant names the number.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    /// The peak learning rate is not positive and finite.
    #[error("the learning rate must be positive, got {0}")]
    Peak(f64),
    /// The cosine's floor is outside `[0, peak]`.
    #[error("the minimum learning rate must be in [0, {peak}], got {min}")]
    Min { peak: f64, min: f64 },
}

/// Linear warmup from 0 to `peak` over `warmup` steps, then [`Decay`] to `min` at step
/// `total`. Steps are numbered from 1 (the first update), as in the shipped models'
/// TRAINING.md: step 1 of a 150-step warmup to 2e-3 runs at 2e-3/150 = 1.33e-5.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LrSchedule {
    pub peak: f64,
    /// The floor of the cosine (unused by [`Decay::Constant`]).
    pub min: f64,
    pub warmup: u64,
    /// The step at which the cosine reaches `min`; later steps stay at `min`.
    pub total: u64,
    pub decay: Decay,
}

impl LrSchedule {
    /// The learning rate of step `step` (1-based; step 0 is treated as step 1).
    pub fn lr(&self, step: u64) -> f64 {
        let step = step.max(1);
        if step <= self.warmup {
            return self.peak * step as f64 / self.warmup as f64;
        }
        match self.decay {
            Decay::Constant => self.peak,
            Decay::Cosine => {
                let span = self.total.saturating_sub(self.warmup);
                if span == 0 {
                    return self.min;
                }
                let progress = ((step - self.warmup) as f64 / span as f64).min(1.0);
                let cos = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
                self.min + (self.peak - self.min) * cos
            }
        }
    }

    /// Checks the numbers: a positive finite peak, and `0 ≤ min ≤ peak` for the cosine.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        if !(self.peak.is_finite() && self.peak > 0.0) {
            return Err(ScheduleError::Peak(self.peak));
        }
        let cosine = self.decay == Decay::Cosine;
        if cosine && !(self.min.is_finite() && self.min >= 0.0 && self.min <= self.peak) {
            return Err(ScheduleError::Min {
                peak: self.peak,
                min: self.min,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recipe() -> LrSchedule {
        LrSchedule {
            peak: 2e-3,
            min: 2e-4,
            warmup: 150,
            total: 3856,
            decay: Decay::Cosine,
        }
    }

    #[test]
    fn warmup_is_linear_from_the_first_step() {
        let s = recipe();
        assert!((s.lr(1) - 2e-3 / 150.0).abs() < 1e-18);
        assert!((s.lr(75) - 1e-3).abs() < 1e-15);
        assert_eq!(s.lr(150), 2e-3);
        assert_eq!(s.lr(0), s.lr(1));
    }

    #[test]
    fn cosine_falls_to_the_floor_and_stays() {
        let s = recipe();
        let mid = 150 + (3856 - 150) / 2;
        assert!((s.lr(mid) - 1.1e-3).abs() < 1e-12, "{}", s.lr(mid));
        assert!((s.lr(3856) - 2e-4).abs() < 1e-15);
        assert_eq!(s.lr(10_000), s.lr(3856));
        let mut last = s.lr(150);
        for step in 151..=3856 {
            let lr = s.lr(step);
            assert!(lr <= last && lr >= 2e-4, "step {step}: {lr}");
            last = lr;
        }
    }

    #[test]
    fn constant_holds_the_peak_and_no_warmup_starts_at_it() {
        let s = LrSchedule {
            warmup: 0,
            decay: Decay::Constant,
            ..recipe()
        };
        assert_eq!(s.lr(1), 2e-3);
        assert_eq!(s.lr(1_000_000), 2e-3);
        let c = LrSchedule {
            warmup: 0,
            ..recipe()
        };
        let h = 0.5 * (1.0 + (std::f64::consts::PI / 3856.0).cos());
        assert!((c.lr(1) - (2e-3 * h + 2e-4 * (1.0 - h))).abs() < 1e-15);
    }

    #[test]
    fn bad_numbers_are_refused() {
        assert!(recipe().validate().is_ok());
        let zero = LrSchedule {
            peak: 0.0,
            ..recipe()
        };
        assert_eq!(zero.validate(), Err(ScheduleError::Peak(0.0)));
        let high_floor = LrSchedule {
            min: 3e-3,
            ..recipe()
        };
        assert_eq!(
            high_floor.validate(),
            Err(ScheduleError::Min {
                peak: 2e-3,
                min: 3e-3
            })
        );
        let nan = LrSchedule {
            peak: f64::NAN,
            ..recipe()
        };
        assert!(matches!(nan.validate(), Err(ScheduleError::Peak(p)) if p.is_nan()));
        assert_eq!(
            high_floor.validate().unwrap_err().to_string(),
            "the minimum learning rate must be in [0, 0.002], got 0.003"
        );
    }
}
