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
    /// The `<h1>` while the visitor is in the line (`WAITING`, `PAUSED`);
    /// kept under this name for operators' templates that use `t.heading`.
    pub heading: &'static str,
    /// The `<h1>` before the line opens (`NOT_OPEN`).
    pub heading_not_open: &'static str,
    /// The `<h1>` once it is the visitor's turn (`ADMITTED`).
    pub heading_admitted: &'static str,
    /// The `<h1>` of a visitor who holds a pass (`ACTIVE`).
    pub heading_active: &'static str,
    /// The `<h1>` once the event is over (`CLOSED`).
    pub heading_closed: &'static str,
    /// The `<h1>` while the visitor is not (or not known to be) in the line:
    /// joining, the browser check, a refusal, a store outage.
    pub heading_outside: &'static str,
    pub position: &'static str,
    pub next: &'static str,
    /// The line's length, plural form (`{count}` ≥ 2, and 0 in English).
    pub queue_length: &'static str,
    /// The line's length, singular form (see `lang::is_one`).
    pub queue_length_one: &'static str,
    pub eta: &'static str,
    pub eta_unknown: &'static str,
    pub almost_there: &'static str,
    /// The ETA line while the line is paused: no estimate is true then.
    pub eta_paused: &'static str,
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
    /// To a visitor without JavaScript asked for a browser check it cannot run.
    pub no_script_check: &'static str,
    /// The redeem page (a continue link that no longer works): its title.
    pub redeem_failed_title: &'static str,
    /// The token was expired, forged, another session's, or already used.
    pub redeem_failed: &'static str,
    /// The event is paused: the token is kept while it is valid.
    pub redeem_paused: &'static str,
    /// The redeem page when the redeem could not be done (the store out of
    /// reach): a static page, so it says what to do, not "retrying".
    pub redeem_other: &'static str,
    /// To a high-risk visitor asked for a CAPTCHA, which this page does not
    /// show (an operator's page that does listens for `anteroom:captcha`).
    pub captcha: &'static str,
    /// The link back to the waiting page.
    pub back_to_line: &'static str,
    pub footer: &'static str,
}

const EN: Messages = Messages {
    title: "Waiting room",
    heading: "You are in line",
    heading_not_open: "The line is not open yet",
    heading_admitted: "It is your turn",
    heading_active: "You have access",
    heading_closed: "This event is closed",
    heading_outside: "Waiting room",
    position: "You are number {position} in line",
    next: "You are next in line",
    queue_length: "{count} people in line",
    queue_length_one: "{count} person in line",
    eta: "Estimated wait: {display}",
    eta_unknown: "Estimating your wait…",
    almost_there: "Almost there! Stay on this page.",
    eta_paused: "No wait estimate while the line is paused.",
    not_open: "The line opens soon. Everyone who arrives before opening gets a random place, so there is no need to hurry.",
    countdown: "Opens in {time}",
    paused: "The line is paused for a moment. You keep your place.",
    closed: "This event is closed. Thank you for waiting.",
    draining: "We are having a technical problem. Keep this page open: you keep your place.",
    admitted: "It is your turn! Taking you there…",
    active: "You already have access.",
    joining: "Joining the line…",
    checking: "Checking your browser, this takes a few seconds…",
    rate_limited: "Too many requests came from this browser or its network at once. Retrying in a moment…",
    retrying: "Connection problem. Retrying…",
    blocked: "We could not let this browser into the line.",
    continue_label: "Continue",
    progress_label: "Your progress in line",
    keep_open: "Keep this page open. It updates by itself; refreshing does not lose your place.",
    no_script: "This page refreshes itself every 10 seconds.",
    no_script_check: "Before it can join the line, your browser must pass a quick check that needs JavaScript. Turn JavaScript on for this site, then reload this page.",
    redeem_failed_title: "This link has expired",
    redeem_failed: "This link to continue has expired or has already been used. If you are still in line, the waiting room shows where you stand; if not, it lets you join again.",
    redeem_paused: "The line is paused for a moment, so you cannot continue yet. Your turn is kept for a short while: go back to the waiting room, it continues by itself when the line resumes.",
    redeem_other: "We are having a technical problem, so you cannot continue yet. Your turn is kept for a short while: go back to the waiting room, it continues by itself.",
    captcha: "One more check is needed before you can join the line, and this page cannot show it. Please try again later.",
    back_to_line: "Back to the waiting room",
    footer: "Waiting room by Anteroom. This page sets only the cookies needed to keep your place.",
};

const FR: Messages = Messages {
    title: "Salle d’attente",
    heading: "Vous êtes dans la file",
    heading_not_open: "La file n’est pas encore ouverte",
    heading_admitted: "C’est votre tour",
    heading_active: "Vous avez accès",
    heading_closed: "Cet événement est terminé",
    heading_outside: "Salle d’attente",
    position: "Vous êtes numéro {position} dans la file",
    next: "Vous êtes le prochain dans la file",
    queue_length: "{count} personnes dans la file",
    queue_length_one: "{count} personne dans la file",
    eta: "Attente estimée : {display}",
    eta_unknown: "Estimation de votre attente…",
    almost_there: "Vous y êtes presque ! Restez sur cette page.",
    eta_paused: "Pas d’estimation de l’attente pendant la pause.",
    not_open: "La file ouvre bientôt. Chaque personne arrivée avant l’ouverture reçoit une place tirée au hasard : inutile de se presser.",
    countdown: "Ouverture dans {time}",
    paused: "La file est en pause un instant. Vous gardez votre place.",
    closed: "Cet événement est terminé. Merci de votre patience.",
    draining: "Nous avons un problème technique. Gardez cette page ouverte : vous gardez votre place.",
    admitted: "C’est votre tour ! Redirection en cours…",
    active: "Vous avez déjà accès.",
    joining: "Entrée dans la file…",
    checking: "Vérification de votre navigateur, quelques secondes…",
    rate_limited: "Trop de demandes sont venues de ce navigateur ou de son réseau en même temps. Nouvel essai dans un instant…",
    retrying: "Problème de connexion. Nouvel essai…",
    blocked: "Nous ne pouvons pas faire entrer ce navigateur dans la file.",
    continue_label: "Continuer",
    progress_label: "Votre progression dans la file",
    keep_open: "Gardez cette page ouverte. Elle se met à jour toute seule ; actualiser ne vous fait pas perdre votre place.",
    no_script: "Cette page s’actualise toute seule toutes les 10 secondes.",
    no_script_check: "Avant d’entrer dans la file, votre navigateur doit passer une courte vérification qui demande JavaScript. Activez JavaScript pour ce site, puis rechargez cette page.",
    redeem_failed_title: "Ce lien a expiré",
    redeem_failed: "Ce lien pour continuer a expiré ou a déjà servi. Si vous êtes encore dans la file, la salle d’attente vous montre votre place ; sinon, elle vous permet d’y entrer à nouveau.",
    redeem_paused: "La file est en pause un instant : vous ne pouvez pas encore continuer. Votre tour est gardé peu de temps : retournez à la salle d’attente, elle reprend toute seule quand la file repart.",
    redeem_other: "Nous avons un problème technique : vous ne pouvez pas encore continuer. Votre tour est gardé peu de temps : retournez à la salle d’attente, elle reprend toute seule.",
    captcha: "Une vérification de plus est nécessaire avant d’entrer dans la file, et cette page ne peut pas l’afficher. Réessayez plus tard.",
    back_to_line: "Retour à la salle d’attente",
    footer: "Salle d’attente Anteroom. Cette page n’utilise que les cookies nécessaires pour garder votre place.",
};

/// The sentences for `lang`.
pub fn for_lang(lang: Lang) -> &'static Messages {
    match lang {
        Lang::En => &EN,
        Lang::Fr => &FR,
    }
}
