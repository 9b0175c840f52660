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
