//! What the built-in templates' unit tests share: every parameter at its
//! default, the checks every declaration must pass, and running
//! experiments over the emulator one test at a time.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::oneoff::{run_experiments, OneOffOptions, OneOffResult};
use crate::param::{valid_name, Params, Value};
use crate::template::{Template, TemplateError};

/// Every parameter of `template` at its default.
pub(crate) fn defaults(template: &dyn Template) -> Params {
    let mut p = Params::default();
    for d in template.params() {
        p.insert(&d.name, d.default);
    }
    p
}

/// Every declaration of `template` has a valid name and a doc line, and
/// its default reads back from its canonical text (except the parameters
/// named in `not_canonical`, whose default is a placeholder of its own).
pub(crate) fn assert_declarations_valid(template: &dyn Template, not_canonical: &[&str]) {
    for d in template.params() {
        assert!(valid_name(&d.name), "{}", d.name);
        assert!(!d.doc.is_empty(), "{} has no doc", d.name);
        if !not_canonical.contains(&d.name.as_str()) {
            assert_eq!(d.ty.parse_text(&d.default.to_text()).unwrap(), d.default, "{} default round-trips", d.name);
        }
    }
}

/// Each `(parameter, value, form)` of `cases`, set over the defaults of
/// `template`, is refused by `check` with a message that names `form`
/// (the allowed form).
pub(crate) fn assert_each_refused<'a, T: std::fmt::Debug>(
    template: &dyn Template,
    cases: impl IntoIterator<Item = (&'a str, Value, &'a str)>,
    check: impl Fn(&Params) -> Result<T, TemplateError>,
) {
    for (name, value, form) in cases {
        let mut p = defaults(template);
        p.insert(name, value);
        let e = check(&p).unwrap_err().to_string();
        assert!(e.contains(form), "{name}: {e}");
    }
}

/// One emulator test at a time in this test binary: they measure, and
/// experiments of concurrent `run_experiments` calls in one process get
/// the same testbed names.
pub(crate) fn emulator_test_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `experiments` of `template` over the emulator, holding
/// [`emulator_test_lock`]; `None` (after saying so) where the emulator
/// cannot run (not root), so that the test passes as skipped.
pub(crate) fn run_on_emulator(
    template: Arc<dyn Template>,
    experiments: Vec<Vec<(String, Value)>>,
    options: &OneOffOptions,
) -> Option<Vec<OneOffResult>> {
    if braid_emu::check_capabilities().is_err() {
        eprintln!("skipped: needs the emulator (root)");
        return None;
    }
    let _serial = emulator_test_lock();
    Some(run_experiments(template, experiments, options).expect("the one-off runner starts"))
}
