/// Parses a size such as `8G`, `512M`, `4096` or `1T` (powers of 1024) into bytes.
///
/// ```
/// use vbmq::config::parse_size;
/// assert_eq!(parse_size("8G"), Some(8 << 30));
/// assert_eq!(parse_size("512M"), Some(512 << 20));
/// assert_eq!(parse_size("4096"), Some(4096));
/// assert_eq!(parse_size("12Q"), None);
/// ```
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, shift) = match text.char_indices().last()? {
        (i, 'k' | 'K') => (&text[..i], 10),
        (i, 'm' | 'M') => (&text[..i], 20),
        (i, 'g' | 'G') => (&text[..i], 30),
        (i, 't' | 'T') => (&text[..i], 40),
        _ => (text, 0),
    };
    let value: u64 = digits.parse().ok()?;
    value.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8G"), Some(8 << 30));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("1k"), Some(1024));
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("G"), None);
        assert_eq!(parse_size("-1G"), None);
        assert_eq!(parse_size("99999999999T"), None);
    }
}
