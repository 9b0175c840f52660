//! Every sentence of the waiting page, per language.
//!
//! The same table feeds the server-side render and, as JSON, the script, so the
//! page says the same thing with and without JavaScript. Placeholders in braces
//! (`{position}`) are filled by both sides.

use serde::Serialize;

use super::Lang;

/// The page's sentences in one language.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Messages {
    pub title: &'static str,
    pub heading: &'static str,
    pub position: &'static str,
    pub next: &'static str,
    pub queue_length: &'static str,
    pub eta: &'static str,
    pub eta_unknown: &'static str,
    pub almost_there: &'static str,
    pub not_open: &'static str,
    pub countdown: &'static str,
    pub paused: &'static str,
    pub closed: &'static str,
    pub draining: &'static str,
    pub admitted: &'static str,
    pub active: &'static str,
    pub joining: &'static str,
    pub checking: &'static str,
    pub rate_limited: &'static str,
    pub retrying: &'static str,
    pub blocked: &'static str,
    pub continue_label: &'static str,
    pub progress_label: &'static str,
    pub keep_open: &'static str,
    pub no_script: &'static str,
    pub footer: &'static str,
}

const EN: Messages = Messages {
    title: "Waiting room",
    heading: "You are in line",
    position: "You are number {position} in line",
    next: "You are next in line",
    queue_length: "{count} people in line",
    eta: "Estimated wait: {display}",
    eta_unknown: "Estimating your wait…",
    almost_there: "Almost there! Stay on this page.",
    not_open: "The line opens soon. Everyone who arrives before opening gets a random place, so there is no need to hurry.",
    countdown: "Opens in {time}",
    paused: "The line is paused for a moment. You keep your place.",
    closed: "This event is closed. Thank you for waiting.",
    draining: "We are having a technical problem. Keep this page open: you keep your place.",
    admitted: "It is your turn! Taking you there…",
    active: "You already have access.",
    joining: "Joining the line…",
    checking: "Checking your browser, this takes a few seconds…",
    rate_limited: "Many people are arriving. Retrying in a moment…",
    retrying: "Connection problem. Retrying…",
    blocked: "We could not let this browser into the line.",
    continue_label: "Continue",
    progress_label: "Your progress in line",
    keep_open: "Keep this page open. It updates by itself; refreshing does not lose your place.",
    no_script: "This page refreshes itself every 10 seconds.",
    footer: "Waiting room by Anteroom. This page sets only the cookies needed to keep your place.",
};

const FR: Messages = Messages {
    title: "Salle d’attente",
    heading: "Vous êtes dans la file",
    position: "Vous êtes numéro {position} dans la file",
    next: "Vous êtes le prochain dans la file",
    queue_length: "{count} personnes dans la file",
    eta: "Attente estimée : {display}",
    eta_unknown: "Estimation de votre attente…",
    almost_there: "Vous y êtes presque ! Restez sur cette page.",
    not_open: "La file ouvre bientôt. Chaque personne arrivée avant l’ouverture reçoit une place tirée au hasard : inutile de se presser.",
    countdown: "Ouverture dans {time}",
    paused: "La file est en pause un instant. Vous gardez votre place.",
    closed: "Cet événement est terminé. Merci de votre patience.",
    draining: "Nous avons un problème technique. Gardez cette page ouverte : vous gardez votre place.",
    admitted: "C’est votre tour ! Redirection en cours…",
    active: "Vous avez déjà accès.",
    joining: "Entrée dans la file…",
    checking: "Vérification de votre navigateur, quelques secondes…",
    rate_limited: "Beaucoup de personnes arrivent. Nouvel essai dans un instant…",
    retrying: "Problème de connexion. Nouvel essai…",
    blocked: "Nous ne pouvons pas faire entrer ce navigateur dans la file.",
    continue_label: "Continuer",
    progress_label: "Votre progression dans la file",
    keep_open: "Gardez cette page ouverte. Elle se met à jour toute seule ; actualiser ne vous fait pas perdre votre place.",
    no_script: "Cette page s’actualise toute seule toutes les 10 secondes.",
    footer: "Salle d’attente Anteroom. Cette page n’utilise que les cookies nécessaires pour garder votre place.",
};

/// The sentences for `lang`.
pub fn for_lang(lang: Lang) -> &'static Messages {
    match lang {
        Lang::En => &EN,
        Lang::Fr => &FR,
    }
}
