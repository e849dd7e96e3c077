"""verify_webhook (policies/webhook_signing.py): whatever a request's headers hold, the check of it raises only
WebhookRejected (a receiver that catches it never answers 500); a secret that cannot sign is the receiver's
configuration error, raised as such and never reported as a rejected request."""

from __future__ import annotations

import base64

import pytest

from policies.webhook_signing import WebhookRejected, WebhookSecretError, verify_webhook, webhook_headers

BODY = b'{"ok":true}'


class TestHostileHeaders:
    @pytest.mark.parametrize(
        "stamp",
        [
            "²",
            "١٧٠٠٠٠٠٠٠٠",
            "9" * 400,
            "9" * 13,
            "",
            " 1700000000",
            "1700000000\n",
            "+1700000000",
            "1e9",
            "-1",
        ],
        ids=[
            "superscript",
            "arabic-digits",
            "400-digits",
            "13-digits",
            "empty",
            "space",
            "newline",
            "plus",
            "exp",
            "neg",
        ],
    )
    def test_a_malformed_timestamp_is_rejected(self, stamp: str) -> None:
        """A webhook-timestamp that is not 1 to 12 ASCII digits ("²" passed str.isdigit and then failed int();
        400 digits overflowed the clock) is a WebhookRejected, nothing else."""
        headers = {**webhook_headers("s3cret", "op-1", BODY), "webhook-timestamp": stamp}
        with pytest.raises(WebhookRejected, match="malformed webhook-timestamp"):
            verify_webhook("s3cret", BODY, headers)

    def test_twelve_digits_far_from_now_are_outside_the_window(self) -> None:
        """The longest timestamp admitted by its form is judged by the window, not by a crash in the clock."""
        headers = {**webhook_headers("s3cret", "op-1", BODY), "webhook-timestamp": "9" * 12}
        with pytest.raises(WebhookRejected, match="tolerance window"):
            verify_webhook("s3cret", BODY, headers)

    def test_a_good_request_still_verifies(self) -> None:
        """Headers made by webhook_headers verify, with a plain and a whsec_ secret (padded or not)."""
        key = base64.b64encode(b"sixteen byte key").decode()
        for secret in ("s3cret", f"whsec_{key}", f"whsec_{key.rstrip('=')}"):
            verify_webhook(secret, BODY, webhook_headers(secret, "op-2", BODY))


class TestRotation:
    def test_a_rotation_signs_with_both_secrets_and_either_receiver_accepts(self) -> None:
        """Mid-rotation the sender signs with the new secret and the previous one (two space-separated v1
        signatures): a receiver still on the old secret, one on the new, and one accepting both, all verify;
        a receiver on a third secret does not."""
        new, old = "whsec_" + base64.b64encode(b"the new key 1234").decode(), "the old secret"
        headers = webhook_headers(new, "op-9", BODY, previous_secrets=[old])
        assert len(headers["webhook-signature"].split(" ")) == 2
        for receiver in (new, old, [old, new], [new, old]):
            verify_webhook(receiver, BODY, headers)
        with pytest.raises(WebhookRejected, match="No matching signature"):
            verify_webhook("a third secret", BODY, headers)

    def test_a_receiver_with_two_secrets_accepts_a_sender_on_either(self) -> None:
        """The receiver moves first: it accepts both secrets while senders move from the old one to the new."""
        for sender in ("old", "new"):
            verify_webhook(["new", "old"], BODY, webhook_headers(sender, "op-10", BODY))
        with pytest.raises(WebhookRejected):
            verify_webhook(["new", "old"], BODY, webhook_headers("other", "op-10", BODY))

    def test_a_repeated_secret_signs_once_and_no_secret_is_a_configuration_error(self) -> None:
        assert (
            " " not in webhook_headers("same", "op-11", BODY, previous_secrets=["same"])["webhook-signature"]
        )
        with pytest.raises(WebhookSecretError, match="at least one secret"):
            verify_webhook([], BODY, webhook_headers("s3cret", "op-11", BODY))
        with pytest.raises(WebhookSecretError):  # an unusable previous secret is caught like the secret
            webhook_headers("s3cret", "op-11", BODY, previous_secrets=["whsec_a"])


class TestSecrets:
    @pytest.mark.parametrize(
        "secret",
        ["", "whsec_", "whsec_====", "whsec_a", "whsec_!!!!", "whsec_YW Jj", "whsec_YW-j"],
        ids=["empty", "prefix-only", "padding-only", "one-char", "not-base64", "space", "urlsafe"],
    )
    def test_an_unusable_secret_is_a_configuration_error(self, secret: str) -> None:
        """An empty secret, or a whsec_ one whose rest is not strict base64 of at least one byte, raises
        WebhookSecretError (a ValueError, not a WebhookRejected: EmptyWebhookSecretError escaped before), before
        any header is read, so even a request with no headers gets it."""
        with pytest.raises(WebhookSecretError) as raised:
            verify_webhook(secret, BODY, {})
        assert isinstance(raised.value, ValueError) and not isinstance(raised.value, WebhookRejected)
        assert "webhook secret" in str(raised.value)
        with pytest.raises(WebhookSecretError):
            webhook_headers(secret, "op-3", BODY)
