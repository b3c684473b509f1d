//! An X.509 certificate's DER in, its validity period (Unix seconds) out: just enough DER to walk
//! `Certificate → tbsCertificate → validity`, so an expired certificate is refused at start
//! (rustls never checks its own).

/// `(not_before, not_after)` in Unix seconds, or None if this is not a certificate we can read.
pub fn validity(cert: &[u8]) -> Option<(i64, i64)> {
    let (tag, certificate, _) = element(cert)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, mut tbs, _) = element(certificate)?;
    if tag != 0x30 {
        return None;
    }
    // [0] version (optional), serialNumber, signature, issuer, then validity.
    let (tag, _, rest) = element(tbs)?;
    if tag == 0xa0 {
        tbs = rest;
        let (_, _, rest) = element(tbs)?;
        tbs = rest;
    } else {
        tbs = rest;
    }
    for _ in 0..2 {
        let (_, _, rest) = element(tbs)?;
        tbs = rest;
    }
    let (tag, validity, _) = element(tbs)?;
    if tag != 0x30 {
        return None;
    }
    let (t1, before, rest) = element(validity)?;
    let (t2, after, _) = element(rest)?;
    Some((time(t1, before)?, time(t2, after)?))
}

/// One TLV: (tag, contents, what follows).
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// UTCTime (0x17, YYMMDDHHMMSSZ) or GeneralizedTime (0x18, YYYYMMDDHHMMSSZ) → Unix seconds.
fn time(tag: u8, text: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(text).ok()?.strip_suffix('Z')?;
    let num = |s: &str| s.parse::<i64>().ok();
    let (year, rest) = match tag {
        0x17 => {
            let yy = num(text.get(..2)?)?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, text.get(2..)?)
        }
        0x18 => (num(text.get(..4)?)?, text.get(4..)?),
        _ => return None,
    };
    if rest.len() != 10 {
        return None;
    }
    let [mo, d, h, mi, s] = [0, 2, 4, 6, 8].map(|i| rest.get(i..i + 2).and_then(num));
    Some(crate::model::wall::days_from_civil(year, mo?, d?) * 86_400 + h? * 3600 + mi? * 60 + s?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(time(0x17, b"000301000000Z"), Some(951_868_800));
        assert_eq!(time(0x18, b"20380119031408Z"), Some(2_147_483_648));
        assert_eq!(time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(time(0x17, b"7001010000Z"), None);
        assert_eq!(time(0x04, b"700101000000Z"), None);
    }
}
