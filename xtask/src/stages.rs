//! Stage timings: each stage of a task with its wall time, printed as a table when the task ends,
//! passed or failed, so that a slow or failing run says where its time went.
//!
//! A stage may hold stages of its own (the QEMU boards inside `qemu`, say); the table indents
//! them under it. `cargo xtask ci` prints the table of the whole run and warns when the total
//! passes its budget ([`BUDGET_SECS`]), naming the largest stages.

use std::time::Instant;

/// Seconds the whole test command may take before `cargo xtask ci` warns: CI stops a run at
/// 5,400 s on a 2-core machine, and a run that takes half of that leaves too little margin for
/// a slow machine and the next board.
pub const BUDGET_SECS: f64 = 2700.0;

/// How many of the largest stages the budget warning names.
const LARGEST_NAMED: usize = 5;

/// The stages of one run, in the order they started.
pub struct Stages {
    rows: Vec<Row>,
    depth: usize,
    started: Instant,
    /// Seconds of stages that ended before the table was made ([`Stages::record_earlier`]).
    earlier: f64,
}

struct Row {
    name: String,
    depth: usize,
    secs: f64,
    outcome: Outcome,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Outcome {
    Running,
    Passed,
    Failed,
}

impl Default for Stages {
    fn default() -> Self {
        Self::new()
    }
}

impl Stages {
    /// An empty table; the total counts from now.
    pub fn new() -> Self {
        Self {
            rows: Vec::new(),
            depth: 0,
            started: Instant::now(),
            earlier: 0.0,
        }
    }

    /// Runs `f` as the stage `name`, inside the stage that is running, if any: its time and
    /// whether it failed go into the table.
    pub fn run<T>(
        &mut self,
        name: impl Into<String>,
        f: impl FnOnce(&mut Self) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let index = self.rows.len();
        self.rows.push(Row {
            name: name.into(),
            depth: self.depth,
            secs: 0.0,
            outcome: Outcome::Running,
        });
        let start = Instant::now();
        self.depth += 1;
        let result = f(self);
        self.depth -= 1;
        let row = &mut self.rows[index];
        row.secs = start.elapsed().as_secs_f64();
        row.outcome = if result.is_ok() {
            Outcome::Passed
        } else {
            Outcome::Failed
        };
        result
    }

    /// Adds a stage that ran elsewhere (a background task), `secs` long.
    pub fn record(&mut self, name: impl Into<String>, secs: f64, passed: bool) {
        self.rows.push(Row {
            name: name.into(),
            depth: self.depth,
            secs,
            outcome: if passed {
                Outcome::Passed
            } else {
                Outcome::Failed
            },
        });
    }

    /// Adds a stage that ended before the table was made (the set-up of the process that
    /// started this one), `secs` long: the total counts it too.
    pub fn record_earlier(&mut self, name: impl Into<String>, secs: f64) {
        self.record(name, secs, true);
        self.earlier += secs;
    }

    /// Seconds since the table was made, and of the stages before it.
    pub fn total_secs(&self) -> f64 {
        self.earlier + self.started.elapsed().as_secs_f64()
    }

    /// The table: one line a stage, inner stages indented, the failed ones marked, then the
    /// total.
    pub fn table(&self) -> String {
        let total = self.total_secs();
        let width = self
            .rows
            .iter()
            .map(|r| 2 * r.depth + r.name.chars().count())
            .chain(["total".len()])
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for row in &self.rows {
            let name = format!("{}{}", "  ".repeat(row.depth), row.name);
            let mark = match row.outcome {
                Outcome::Passed => "",
                Outcome::Failed => "  FAILED",
                Outcome::Running => "  (not finished)",
            };
            out.push_str(&format!("  {name:<width$}  {:>7.1} s{mark}\n", row.secs));
        }
        out.push_str(&format!("  {:<width$}  {total:>7.1} s\n", "total"));
        out
    }

    /// The stages with no stages inside them, largest first: where the time went.
    fn largest_leaves(&self) -> Vec<(&str, f64)> {
        let mut leaves: Vec<(&str, f64)> = self
            .rows
            .iter()
            .enumerate()
            .filter(|(i, row)| {
                self.rows
                    .get(i + 1)
                    .is_none_or(|next| next.depth <= row.depth)
            })
            .map(|(_, row)| (row.name.as_str(), row.secs))
            .collect();
        leaves.sort_by(|a, b| b.1.total_cmp(&a.1));
        leaves
    }

    /// A warning when the run took longer than `budget` seconds, naming its largest stages;
    /// `None` within the budget.
    pub fn over_budget(&self, budget: f64) -> Option<String> {
        let total = self.total_secs();
        if total <= budget {
            return None;
        }
        let largest: Vec<String> = self
            .largest_leaves()
            .into_iter()
            .take(LARGEST_NAMED)
            .map(|(name, secs)| format!("{name} ({secs:.0} s)"))
            .collect();
        Some(format!(
            "warning: the run took {total:.0} s, over its budget of {budget:.0} s; the largest \
             stages: {}",
            largest.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::bail;

    #[test]
    fn stages_nest_and_a_failure_is_marked() {
        let mut stages = Stages::new();
        stages.run("fmt", |_| Ok(())).unwrap();
        let err = stages
            .run("qemu", |s| {
                s.run("mps2-an386", |_| Ok(()))?;
                s.run("riscv-virt", |_| -> anyhow::Result<()> { bail!("differs") })
            })
            .unwrap_err();
        assert_eq!(err.to_string(), "differs");
        let table = stages.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 5, "{table}");
        assert!(lines[0].trim_start().starts_with("fmt "), "{table}");
        assert!(!lines[0].contains("FAILED"), "{table}");
        assert!(lines[1].trim_end().ends_with("FAILED"), "{table}");
        assert!(lines[2].starts_with("    mps2-an386"), "{table}");
        assert!(!lines[2].contains("FAILED"), "{table}");
        assert!(lines[3].starts_with("    riscv-virt"), "{table}");
        assert!(lines[3].trim_end().ends_with("FAILED"), "{table}");
        assert!(lines[4].trim_start().starts_with("total"), "{table}");
    }

    #[test]
    fn the_budget_warning_names_the_largest_leaf_stages() {
        let mut stages = Stages::new();
        stages
            .run("outer", |s| {
                s.run("small", |_| Ok(()))?;
                s.run("large", |_| {
                    std::thread::sleep(std::time::Duration::from_millis(30));
                    Ok(())
                })
            })
            .unwrap();
        assert_eq!(stages.over_budget(3600.0), None);
        let warning = stages.over_budget(0.0).unwrap();
        assert!(warning.contains("over its budget of 0 s"), "{warning}");
        let stages_named = warning.split("largest stages: ").nth(1).unwrap();
        assert!(stages_named.starts_with("large ("), "{warning}");
        assert!(!stages_named.contains("outer"), "{warning}");

        // A stage before the table counts in the total and can be the largest.
        stages.record_earlier("set-up", 5000.0);
        assert!(stages.total_secs() >= 5000.0);
        let warning = stages.over_budget(3600.0).unwrap();
        assert!(
            warning.contains("largest stages: set-up (5000 s)"),
            "{warning}"
        );
    }
}
