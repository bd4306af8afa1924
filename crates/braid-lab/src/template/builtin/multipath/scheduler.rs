//! A ProgMP scheduler named by a template parameter: an existing
//! `.progmp` file is compiled, anything else names a shipped scheduler
//! (`braid progmp list`; underscores, dashes and case do not matter,
//! `default` is the default scheduler).
//!
//! ```
//! use braid_lab::template::builtin::multipath::scheduler::load;
//! let (name, _program) = load("minRTT").unwrap();
//! assert_eq!(name, "min_rtt");
//! assert!(load("fastest").unwrap_err().to_string().contains("one of"));
//! ```

use std::path::Path;
use std::sync::Arc;

use braid::progmp::{Program, BUILTINS, DEFAULT_SCHEDULER};

use crate::template::TemplateError;

fn squash(name: &str) -> String {
    name.chars().filter(|c| *c != '_' && *c != '-').flat_map(char::to_lowercase).collect()
}

/// The scheduler `name_or_file` names, with its name (the file's
/// `SCHEDULER` name, or the shipped one's canonical name).
pub fn load(name_or_file: &str) -> Result<(String, Arc<Program>), TemplateError> {
    let path = Path::new(name_or_file);
    if path.is_file() {
        let source = std::fs::read_to_string(path).map_err(|e| TemplateError::io(format!("scheduler {name_or_file}"), e))?;
        let program = Program::compile(&source).map_err(|e| {
            TemplateError::Invalid(format!(
                "scheduler {name_or_file}: not a valid ProgMP scheduler:\n{}",
                e.render(name_or_file, &source)
            ))
        })?;
        let name = program.name().map(str::to_string).unwrap_or_else(|| name_or_file.to_string());
        return Ok((name, Arc::new(program)));
    }
    let wanted = squash(if name_or_file == "default" { DEFAULT_SCHEDULER } else { name_or_file });
    let Some(builtin) = BUILTINS.iter().find(|b| squash(b.name) == wanted) else {
        let known: Vec<&str> = BUILTINS.iter().map(|b| b.name).collect();
        return Err(TemplateError::Invalid(format!(
            "scheduler {name_or_file}: no such file, and not a shipped scheduler; expected a .progmp file or one of: {}",
            known.join(", ")
        )));
    };
    let program = Program::compile(builtin.source)
        .map_err(|e| TemplateError::Failed(format!("shipped scheduler {} does not compile: {e}", builtin.name)))?;
    Ok((builtin.name.to_string(), Arc::new(program)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_scheduler_loads_under_its_name() {
        for b in BUILTINS {
            assert_eq!(load(b.name).unwrap().0, b.name);
            assert_eq!(load(&b.name.to_uppercase().replace('_', "-")).unwrap().0, b.name);
        }
        assert_eq!(load("default").unwrap().0, DEFAULT_SCHEDULER);
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
        let e = load(bad.to_str().unwrap()).unwrap_err().to_string();
        assert!(e.contains("not a valid ProgMP scheduler"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
