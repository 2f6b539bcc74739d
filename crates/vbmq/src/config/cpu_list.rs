/// Parses a CPU list such as `2-5`, `2,4,6,8` or `1,3-4` into CPU numbers, in order.
///
/// ```
/// use vbmq::config::parse_cpu_list;
/// assert_eq!(parse_cpu_list("2-5"), Some(vec![2, 3, 4, 5]));
/// assert_eq!(parse_cpu_list("1,3-4"), Some(vec![1, 3, 4]));
/// assert_eq!(parse_cpu_list("5-2"), None);
/// ```
pub fn parse_cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.split(',') {
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last): (usize, usize) = (first.parse().ok()?, last.parse().ok()?);
                if last < first || last - first >= 4096 {
                    return None;
                }
                cpus.extend(first..=last);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(parse_cpu_list("2-5"), Some(vec![2, 3, 4, 5]));
        assert_eq!(parse_cpu_list("2,4,6"), Some(vec![2, 4, 6]));
        assert_eq!(parse_cpu_list("1,3-4"), Some(vec![1, 3, 4]));
        assert_eq!(parse_cpu_list("5-2"), None);
        assert_eq!(parse_cpu_list("a"), None);
        assert_eq!(parse_cpu_list(""), None);
    }
}
