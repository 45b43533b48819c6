"""Item 8: wrong console logins slow down the client that sends them, never the owner.

Over real HTTP: one loopback client (127.0.0.2) sends wrong tokens until it is throttled; the
correct token still logs in from that very client, and another client (127.0.0.1) is not
throttled at all.
"""

from __future__ import annotations

import httpx

from tests.console_kit import CONSOLE_TOKEN, console_config, running_console


async def test_wrong_logins_never_lock_the_owner_out(make_config) -> None:
    async with running_console(console_config(make_config), login=False) as console:
        url, origin = console.server.url, console.origin
        attacker = httpx.AsyncClient(base_url=url, timeout=30,
                                     transport=httpx.AsyncHTTPTransport(local_address="127.0.0.2"))
        async with attacker:
            statuses = [(await attacker.post("/api/console/login", json={"token": f"guess-{n}"},
                                             headers=origin)).status_code for n in range(15)]
            assert set(statuses[:10]) == {401} and set(statuses[10:]) == {429}, statuses
            # A throttled client with the right token is let in all the same.
            right = await attacker.post("/api/console/login", json={"token": CONSOLE_TOKEN}, headers=origin)
            assert right.status_code == 200, right.text
            assert (await attacker.post("/api/console/login", json={"token": "again-wrong"},
                                        headers=origin)).status_code == 429
        # Another client is judged on its own attempts.
        wrong = await console.client.post("/api/console/login", json={"token": "typo"}, headers=origin)
        assert wrong.status_code == 401
        assert (await console.login()).status_code == 200
