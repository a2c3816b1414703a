"""The harness: a team's own async client code run against tailsim's providers in simulated time.

`clock` is an asyncio event loop whose time is the simulation's: it advances to the next asyncio
timer or simpy event, whichever comes first, so `asyncio.sleep`, `asyncio.timeout`, the SDKs'
retry sleeps and httpx timeouts cost no wall time. `service` serves each HTTP call on the
engine's own providers and draws; `transport` speaks the OpenAI and Anthropic HTTP APIs over it
(an httpx transport the SDKs take through `http_client=`); `clients` hands the user's code ready
clients; `runner` replays a scenario's arrivals through the user's handler into the same tables
as `tailsim run`; `sim.api.testing` gives tests the same in a pytest fixture.

A wing: it imports the layers below it (study, engine, analysis, plan, policy, model) and the
SDKs' HTTP client (httpx2); the SDKs themselves only when a handler asks for their clients.
Only `sim.api` imports it.
"""
