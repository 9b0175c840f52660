//! The page's view of a language: the BCP 47 tag for `<html lang>` and the
//! script's `Intl` formatting. The language itself, and its negotiation from
//! `Accept-Language`, is `anteroom_core::eta::Lang`, shared with the ETA words.

use anteroom_core::eta::Lang;

/// The primary language tag of `lang`.
pub fn code(lang: Lang) -> &'static str {
    match lang {
        Lang::En => "en",
        Lang::Fr => "fr",
    }
}

/// Whether `n` takes the singular form of a counted noun: English says
/// "1 person" but "0 people"; French says "0 personne" and "1 personne",
/// "2 personnes". The script applies the same rule (`isOne` in anteroom.js).
pub fn is_one(n: u64, lang: Lang) -> bool {
    match lang {
        Lang::En => n == 1,
        Lang::Fr => n < 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plural_rules() {
        assert!(!is_one(0, Lang::En) && is_one(1, Lang::En) && !is_one(2, Lang::En));
        assert!(is_one(0, Lang::Fr) && is_one(1, Lang::Fr) && !is_one(2, Lang::Fr));
    }
}
