//! What a recording says, whatever agent made it: the calls it names and
//! what became of each.

use serde_json::Value;

/// A session and one of its calls.
pub type CallKey = (String, String);

/// What a recording says became of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It ran, and the recording does not say why (an older transcript, a
    /// format without the agent's permission decision): a question toolgate
    /// asks about it is answered `once`, an answer the report counts as
    /// inferred.
    Ran,
    /// It ran because the agent's own configuration (its mode, a rule, a
    /// hook) allowed it, the recording says, so no person was asked: a
    /// question toolgate asks about it has no recorded answer and is left
    /// unanswered (denied at the end, source `replay`). The text says what
    /// allowed it.
    Allowed(String),
    /// It was refused (a person rejected it, a rule or hook denied it): a
    /// question toolgate asks about it is answered `reject`, with what the
    /// recording says, if anything.
    Refused(Option<String>),
    /// A person's recorded answer, replayed as it was: the fields of a
    /// `permission_response` (`response`, and `message`, `scope`,
    /// `patterns`, `expiresIn` when given), without its id.
    Answered(Value),
}

/// Where a recording's outcomes were read from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadFrom {
    /// From the agent's structured permission record.
    pub fields: usize,
    /// From the text of the result (refusal phrases).
    pub text: usize,
}

/// Milliseconds since the Unix epoch of an RFC 3339 UTC time
/// (`2026-11-24T03:21:39.409Z`, fractions optional); `None` for anything
/// else.
pub fn epoch_ms(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut date = date.split('-').map(|part| part.parse::<i64>().ok());
    let (year, month, day) = (date.next()??, date.next()??, date.next()??);
    let (clock, fraction) = time.split_once('.').unwrap_or((time, ""));
    let mut clock = clock.split(':').map(|part| part.parse::<i64>().ok());
    let (hour, minute, second) = (clock.next()??, clock.next()??, clock.next()??);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let millis: i64 = match fraction.len() {
        0 => 0,
        _ => format!("{:0<3}", &fraction[..fraction.len().min(3)])
            .parse()
            .ok()?,
    };
    // Days from the civil date (proleptic Gregorian).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms = ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis;
    u64::try_from(ms).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_times_in_milliseconds() {
        for (text, expected) in [
            ("1970-01-01T00:00:00Z", Some(0)),
            ("2026-11-24T03:21:39.409Z", Some(1_795_490_499_409)),
            ("2000-02-29T12:00:00.5Z", Some(951_825_600_500)),
            ("2026-11-24T03:21:39", None),
            ("2026-13-01T00:00:00Z", None),
            ("yesterday", None),
        ] {
            assert_eq!(super::epoch_ms(text), expected, "{text}");
        }
    }
}
