"""Secret redaction: which environment variable names hold secrets, and values made safe to show.

Values of secret-looking variables never reach the facts at all: the probe's
`distributed_env()` passes every value through `redact_value()` as it collects,
so no later step (table, JSON, JUnit) can leak them.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"


# Names are split into words on '_' (and other separators); a name is secret when
# one word is a secret word, or ends/starts with one (APIKEY, DBPASSWORD,
# AUTHTOKEN). Whole words only for KEY and AUTH, so NCCL_IB_PKEY (an InfiniBand
# partition key, needed to debug IB) and GIT_AUTHOR_NAME stay readable.
SECRET_WORDS = frozenset(
    {
        "TOKEN",
        "TOKENS",
        "KEY",
        "KEYS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWORDS",
        "PASSWD",
        "PASS",
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "CREDS",
        "AUTH",
        "AUTHORIZATION",
        "COOKIE",
        "COOKIES",
        "SESSION",
        "PRIVATE",
        "JWT",  # SLURM_JWT: slurmrestd's bearer token, and it is a SLURM_* variable
        "SIGNATURE",
        "SALT",
    }
)
SECRET_SUFFIXES = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "APIKEY",
    "ACCESSKEY",
    "PRIVATEKEY",
    "CREDENTIALS",
)
SECRET_PREFIXES = ("PASSWORD", "SECRET", "TOKEN", "CREDENTIAL", "AUTHORIZ", "COOKIE", "SESSION", "PRIVATE")
# PWD alone is the working directory; as one word of a longer name (DB_PWD) it is a password.
SECRET_WORDS_IN_LONGER_NAMES = frozenset({"PWD"})
_URL_CREDENTIALS = re.compile(r"(?P<head>[a-zA-Z][\w+.-]*://[^:/@\s]+:)[^@/\s]+@")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says its value is a secret."""
    words = [w for w in re.split(r"[^A-Z0-9]+", name.upper()) if w]
    for word in words:
        if word in SECRET_WORDS or (len(words) > 1 and word in SECRET_WORDS_IN_LONGER_NAMES):
            return True
        if word.endswith(SECRET_SUFFIXES) or word.startswith(SECRET_PREFIXES):
            return True
    return False


def redact_value(name: str, value: str) -> str:
    """The value as it may be shown: `<redacted>` for secret names, URL passwords removed."""
    if is_secret_name(name):
        return REDACTED
    # An endpoint such as etcd://user:pw@host carries its password in the value.
    return _URL_CREDENTIALS.sub(rf"\g<head>{REDACTED}@", value)
