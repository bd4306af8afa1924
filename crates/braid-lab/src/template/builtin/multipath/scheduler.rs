//! A ProgMP scheduler named by a template parameter: an existing
//! `.progmp` file is compiled, anything else names a shipped scheduler
//! (`braid progmp list`; underscores, dashes and case do not matter,
//! `default` is the default scheduler). The loading is
//! [`braid::progmp::load_scheduler`], shared with `braid send`; this
//! module only says which of its errors are the input's fault.
//!
//! ```
//! use braid_lab::template::builtin::multipath::scheduler::load;
//! let (name, _program) = load("minRTT").unwrap();
//! assert_eq!(name, "min_rtt");
//! assert!(load("fastest").unwrap_err().to_string().contains("one of"));
//! ```

use std::sync::Arc;

use braid::progmp::{load_scheduler, LoadError, Program};

use crate::template::TemplateError;

/// The scheduler `name_or_file` names, with its name (the file's
/// `SCHEDULER` name, or the shipped one's canonical name).
pub fn load(name_or_file: &str) -> Result<(String, Arc<Program>), TemplateError> {
    load_scheduler(name_or_file).map_err(|e| match e {
        LoadError::Read { path, source } => TemplateError::io(format!("scheduler {path}"), source),
        LoadError::Invalid { .. } | LoadError::Unknown { .. } => TemplateError::Invalid(format!("scheduler {e}")),
        LoadError::Shipped { .. } => TemplateError::Failed(e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid::progmp::BUILTINS;

    #[test]
    fn a_shipped_name_loads_and_bad_input_is_invalid() {
        for b in BUILTINS {
            assert_eq!(load(&b.name.to_uppercase().replace('_', "-")).unwrap().0, b.name);
        }
        let e = load("fastest").unwrap_err();
        assert!(matches!(&e, TemplateError::Invalid(m) if m.starts_with("scheduler fastest: no such file")), "{e}");
    }

    #[test]
    fn a_file_compiles_and_a_bad_one_says_why() {
        let dir = std::env::temp_dir().join(format!("mp-sched-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.progmp");
        let source = BUILTINS.iter().find(|b| b.name == "redundant").unwrap().source;
        std::fs::write(&good, source).unwrap();
        assert_eq!(load(good.to_str().unwrap()).unwrap().0, "redundant");
        let bad = dir.join("bad.progmp");
        std::fs::write(&bad, "SCHEDULER broken; VAR x = ;").unwrap();
        let e = load(bad.to_str().unwrap()).unwrap_err();
        assert!(matches!(&e, TemplateError::Invalid(m) if m.contains("not a valid ProgMP scheduler")), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
