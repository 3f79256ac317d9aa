//! Distinguished names (X.501 `Name`) as identities: `dn:C=CH, O=Example, CN=gw1` in the
//! config, DER in ID payloads (ID_DER_ASN1_DN) and certificates.
//!
//! Two DNs are the same when they have the same attributes in the same order with the same
//! values, the values compared without regard to ASCII case or to the ASN.1 string type
//! (PrintableString, UTF8String, IA5String...): what operators mean by "the same name",
//! and what tolerates the different encodings `pki`, OpenSSL and this module choose.
//! Multi-valued RDNs count as their attributes in order. Nothing else is normalised
//! (spaces inside values count).

/// Attribute names known in text, their OIDs (DER contents) and the string type written.
const ATTRS: &[(&str, &[u8], u8)] = &[
    ("CN", &[0x55, 0x04, 0x03], UTF8),
    ("SN", &[0x55, 0x04, 0x04], UTF8),
    ("serialNumber", &[0x55, 0x04, 0x05], PRINTABLE),
    ("C", &[0x55, 0x04, 0x06], PRINTABLE),
    ("L", &[0x55, 0x04, 0x07], UTF8),
    ("ST", &[0x55, 0x04, 0x08], UTF8),
    ("O", &[0x55, 0x04, 0x0a], UTF8),
    ("OU", &[0x55, 0x04, 0x0b], UTF8),
    ("T", &[0x55, 0x04, 0x0c], UTF8),
    ("GN", &[0x55, 0x04, 0x2a], UTF8),
    (
        "E",
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01],
        IA5,
    ),
    (
        "DC",
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19],
        IA5,
    ),
    (
        "UID",
        &[0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01],
        UTF8,
    ),
];
const UTF8: u8 = 0x0c;
const PRINTABLE: u8 = 0x13;
const IA5: u8 = 0x16;

/// One attribute: its OID (DER contents) and value (the string's contents).
type Attr<'a> = (&'a [u8], &'a [u8]);

/// Parses `C=CH, O=Example, CN=gw1` (RFC 4514's order of writing is not used: the
/// attributes are written in the certificate's order, as `openssl x509 -subject` and
/// strongSwan print them) into a DER `Name`. `\,` escapes a comma in a value.
pub fn from_text(s: &str) -> Result<Vec<u8>, String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => cur.push(chars.next().ok_or("a trailing `\\`")?),
            ',' => parts.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    parts.push(cur);
    let mut rdns = Vec::new();
    for p in parts {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("`{}` is not ATTRIBUTE=value", p.trim()))?;
        let (k, v) = (k.trim(), v.trim());
        let (_, oid, tag) = ATTRS
            .iter()
            .find(|(n, ..)| n.eq_ignore_ascii_case(k))
            .ok_or_else(|| {
                format!("unknown attribute `{k}` (CN, C, O, OU, L, ST, E, DC, UID, SN, GN, T, serialNumber)")
            })?;
        if v.is_empty() {
            return Err(format!("`{k}` has an empty value"));
        }
        let atv = der(0x30, &[der(0x06, oid), der(*tag, v.as_bytes())].concat());
        rdns.push(der(0x31, &atv));
    }
    Ok(der(0x30, &rdns.concat()))
}

/// A DER `Name` as text (`C=CH, O=Example, CN=gw1`), unknown attributes by OID in hex;
/// `None` if it does not parse.
pub fn to_text(name: &[u8]) -> Option<String> {
    let attrs = attributes(name)?;
    Some(
        attrs
            .iter()
            .map(|(oid, v)| {
                let k = ATTRS
                    .iter()
                    .find(|(_, o, _)| o == oid)
                    .map_or_else(|| hex(oid), |(n, ..)| n.to_string());
                let v = String::from_utf8_lossy(v).replace(',', "\\,");
                format!("{k}={v}")
            })
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// Whether two DER `Name`s are the same name (see the module's doc); a name that does
/// not parse equals nothing.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    match (attributes(a), attributes(b)) {
        (Some(x), Some(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(&y)
                    .all(|((oa, va), (ob, vb))| oa == ob && va.eq_ignore_ascii_case(vb))
        }
        _ => false,
    }
}

/// A key of a DER `Name`: two names are [`same`] exactly when their keys are equal
/// (`None`: the name does not parse, and is the same as nothing). Each attribute's OID and
/// value, length-prefixed, the value in ASCII lower case.
pub fn fold(name: &[u8]) -> Option<Vec<u8>> {
    let mut key = Vec::new();
    for (oid, value) in attributes(name)? {
        key.extend_from_slice(&(oid.len() as u32).to_be_bytes());
        key.extend_from_slice(oid);
        key.extend_from_slice(&(value.len() as u32).to_be_bytes());
        key.extend(value.iter().map(u8::to_ascii_lowercase));
    }
    Some(key)
}

/// The attributes of a DER `Name`, in order.
fn attributes(name: &[u8]) -> Option<Vec<Attr<'_>>> {
    let (tag, rdns, rest) = tlv(name)?;
    if tag != 0x30 || !rest.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    let mut r = rdns;
    while !r.is_empty() {
        let (tag, set, next) = tlv(r)?;
        if tag != 0x31 {
            return None;
        }
        r = next;
        let mut s = set;
        while !s.is_empty() {
            let (tag, atv, next) = tlv(s)?;
            if tag != 0x30 {
                return None;
            }
            s = next;
            let (tag, oid, after) = tlv(atv)?;
            let (_, value, end) = tlv(after)?;
            if tag != 0x06 || !end.is_empty() {
                return None;
            }
            out.push((oid, value));
        }
    }
    Some(out)
}

/// One DER element: (tag, contents, what follows). Lengths up to 4 bytes.
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&l0, mut b) = b.split_first()?;
    let len = if l0 < 0x80 {
        usize::from(l0)
    } else {
        let n = usize::from(l0 & 0x7f);
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n].iter().fold(0usize, |a, &x| a << 8 | usize::from(x));
        b = &b[n..];
        len
    };
    (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
}

/// DER of `tag` and `contents`.
fn der(tag: u8, contents: &[u8]) -> Vec<u8> {
    let len = contents.len();
    let mut v = vec![tag];
    if len < 0x80 {
        v.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|&&b| b == 0).count();
        v.push(0x80 | (bytes.len() - skip) as u8);
        v.extend_from_slice(&bytes[skip..]);
    }
    v.extend_from_slice(contents);
    v
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_to_der_and_back() {
        let d = from_text("C=CH, O=ferrouter test, CN=p256.example").unwrap();
        assert_eq!(
            to_text(&d).unwrap(),
            "C=CH, O=ferrouter test, CN=p256.example"
        );
        // The certificate's subject, as `pki` encodes it, is the same name.
        let cert = include_bytes!("../tests/certs/p256.der");
        let subject = crate::crypto::certificate_subject(cert).unwrap();
        assert!(same(&d, &subject));
        assert!(same(
            &from_text("c=ch,o=FERROUTER TEST,cn=P256.example").unwrap(),
            &subject
        ));
        // Order, values and attribute sets count.
        assert!(!same(
            &from_text("O=ferrouter test, C=CH, CN=p256.example").unwrap(),
            &subject
        ));
        assert!(!same(
            &from_text("C=CH, O=ferrouter test, CN=p384.example").unwrap(),
            &subject
        ));
        assert!(!same(
            &from_text("C=CH, O=ferrouter test").unwrap(),
            &subject
        ));
        assert_eq!(
            to_text(&from_text(r"CN=a\, b").unwrap()).unwrap(),
            r"CN=a\, b"
        );
    }

    #[test]
    fn bad_text_and_der() {
        assert!(from_text("CN").unwrap_err().contains("ATTRIBUTE=value"));
        assert!(from_text("XX=1")
            .unwrap_err()
            .contains("unknown attribute `XX`"));
        assert!(from_text("CN=").unwrap_err().contains("empty"));
        assert!(!same(&[0x30, 0x05], &[0x30, 0x05]));
        assert!(to_text(&[0x30, 0x03, 0x31, 0x01]).is_none());
    }
}
