//! The decimal digits of an integer, written on the stack: for the paths
//! that put a number into a hash or a response on every request, without a
//! formatter or an allocation.

/// Room for the digits of any `u64`.
pub const U64_DIGITS: usize = 20;

/// The decimal digits of `n` (no sign, no leading zeros), written into the
/// end of `buf`.
pub fn digits(n: u64, buf: &mut [u8; U64_DIGITS]) -> &[u8] {
    let mut at = buf.len();
    let mut n = n;
    loop {
        at -= 1;
        // n % 10 < 10, so the cast is lossless.
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[at..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_to_strings() {
        for n in [0, 1, 9, 10, 99, 100, 1_234_567_890, u64::MAX - 1, u64::MAX] {
            let mut buf = [0; U64_DIGITS];
            assert_eq!(digits(n, &mut buf), n.to_string().as_bytes());
        }
    }
}
