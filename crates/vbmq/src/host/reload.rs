//! A reload, planned whole before anything changes: every line of the new file is parsed, every
//! new or changed disk checked against what the process may still add, and each changed disk
//! sorted into a limit change (applied in place) or a replacement (remove and add, only when
//! asked). Any refusal refuses the whole reload.

use std::path::PathBuf;

use crate::config::DiskSpec;
use crate::limits::Limits;

/// What a reload does, in the order it is applied.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Plan {
    /// New disks: (socket, text).
    pub add: Vec<(PathBuf, String)>,
    /// Disks whose line changed in more than their limits: removed, then added as `text`.
    pub replace: Vec<(PathBuf, String)>,
    /// Disks of the old file no longer in the new one.
    pub remove: Vec<PathBuf>,
    /// Disks whose line changed in its limits only: (socket, new limits, new text).
    pub limits: Vec<(PathBuf, Limits, String)>,
}

/// Whether `a` and `b` differ in their limit keys only.
fn limits_only(a: &DiskSpec, b: &DiskSpec) -> bool {
    let (mut a, mut b) = (a.clone(), b.clone());
    a.limits = Limits::default();
    b.limits = Limits::default();
    a == b
}

/// Plans the move from the disks running now (`running`: socket, text and spec; `old`: the
/// texts of the previous file) to the file's new disks (`new`, parsed). `check_add` says why a
/// disk could not be added now; `check_replace` why a running disk (its spec, then the new
/// one) could not be added again once removed. With `replace`, a line that cannot change in
/// place is removed and added; without, it is refused. The error names every refused line.
pub(super) fn plan(
    running: &[(PathBuf, String, DiskSpec)],
    old: &[String],
    new: &[(String, DiskSpec)],
    replace: bool,
    check_add: impl Fn(&DiskSpec) -> Result<(), String>,
    check_replace: impl Fn(&DiskSpec, &DiskSpec) -> Result<(), String>,
) -> Result<Plan, String> {
    let mut plan = Plan::default();
    let mut refused = Vec::new();
    for (text, spec) in new {
        let socket = &spec.socket;
        match running.iter().find(|(s, _, _)| s == socket) {
            // The same line, or a disk added at run time that the file now names as it is.
            Some((_, current, _)) if current == text => {}
            Some((_, _, current)) if limits_only(current, spec) => {
                plan.limits
                    .push((socket.clone(), spec.limits, text.clone()));
            }
            Some((_, _, current)) if replace => match check_replace(current, spec) {
                Ok(()) => plan.replace.push((socket.clone(), text.clone())),
                Err(e) => refused.push(format!("{}: cannot be added again: {e}", socket.display())),
            },
            Some(_) => refused.push(format!(
                "{}: changed beyond its limits (iops=, bps=, ...): cannot change in place \
                 (`vbmq ctl reload --replace` removes and adds it: its guest loses the disk \
                 meanwhile)",
                socket.display()
            )),
            None => match check_add(spec) {
                Ok(()) => plan.add.push((socket.clone(), text.clone())),
                Err(e) => refused.push(format!("{}: {e}", socket.display())),
            },
        }
    }
    for (socket, text, _) in running {
        let in_new = new.iter().any(|(_, spec)| &spec.socket == socket);
        // Only disks the old file gave are the file's to remove; run-time ones stay.
        if !in_new && old.contains(text) {
            plan.remove.push(socket.clone());
        }
    }
    if refused.is_empty() {
        Ok(plan)
    } else {
        Err(refused.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(text: &str) -> (PathBuf, String, DiskSpec) {
        let spec = DiskSpec::parse(text, &[0, 1]).unwrap();
        (spec.socket.clone(), text.to_string(), spec)
    }

    fn line(text: &str) -> (String, DiskSpec) {
        (text.to_string(), DiskSpec::parse(text, &[0, 1]).unwrap())
    }

    const A: &str = "socket=/r/a.sock,path=/i/a.raw";
    const A_LIMITED: &str = "socket=/r/a.sock,path=/i/a.raw,iops=50";
    const A_QUEUES: &str = "socket=/r/a.sock,path=/i/a.raw,queues=2";
    const B: &str = "socket=/r/b.sock,null=1G";
    const C: &str = "socket=/r/c.sock,path=/i/c.raw";

    fn no_files(spec: &DiskSpec) -> Result<(), String> {
        match spec.storage {
            crate::config::Storage::File(_) => Err("no path= disk at run time".into()),
            _ => Ok(()),
        }
    }

    fn no_files_again(_: &DiskSpec, spec: &DiskSpec) -> Result<(), String> {
        no_files(spec)
    }

    #[test]
    fn a_limit_change_is_in_place_and_other_changes_need_replace() {
        let running = [disk(A), disk(B)];
        let old = [A.to_string(), B.to_string()];
        let p = plan(
            &running,
            &old,
            &[line(A_LIMITED), line(B)],
            false,
            no_files,
            no_files_again,
        )
        .unwrap();
        assert_eq!(p.limits.len(), 1);
        assert_eq!(p.limits[0].1.iops, 50);
        assert!(p.add.is_empty() && p.replace.is_empty() && p.remove.is_empty());

        let e = plan(
            &running,
            &old,
            &[line(A_QUEUES), line(B)],
            false,
            no_files,
            no_files_again,
        )
        .unwrap_err();
        assert!(e.contains("/r/a.sock: changed beyond its limits"), "{e}");
        // Asked for, but a confined process cannot open the image again.
        let e = plan(
            &running,
            &old,
            &[line(A_QUEUES), line(B)],
            true,
            no_files,
            no_files_again,
        )
        .unwrap_err();
        assert!(e.contains("cannot be added again"), "{e}");
        let p = plan(
            &running,
            &old,
            &[line(A_QUEUES), line(B)],
            true,
            |_| Ok(()),
            |_, _| Ok(()),
        )
        .unwrap();
        assert_eq!(
            p.replace,
            vec![(PathBuf::from("/r/a.sock"), A_QUEUES.to_string())]
        );
    }

    #[test]
    fn one_refused_line_refuses_the_whole_reload_and_names_each() {
        let running = [disk(A)];
        let old = [A.to_string()];
        let e = plan(
            &running,
            &old,
            &[line(A_LIMITED), line(B), line(C)],
            false,
            no_files,
            no_files_again,
        )
        .unwrap_err();
        assert_eq!(e, "/r/c.sock: no path= disk at run time");
    }

    #[test]
    fn removed_lines_go_and_run_time_disks_stay_or_are_adopted() {
        // B was added at run time: not the file's to remove; named as it is, it is kept.
        let running = [disk(A), disk(B)];
        let old = [A.to_string()];
        let p = plan(&running, &old, &[], false, no_files, no_files_again).unwrap();
        assert_eq!(p.remove, vec![PathBuf::from("/r/a.sock")]);
        let p = plan(
            &running,
            &old,
            &[line(A), line(B)],
            false,
            no_files,
            no_files_again,
        )
        .unwrap();
        assert_eq!(p, Plan::default());
    }
}
