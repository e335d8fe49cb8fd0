"""An agent with a lookup tool whose answer shapes its output (the cassette example).

Each input is a customer's question about an order: ``{"id", "customer", "order", "status_url"}``. The agent
asks the ``order_status`` tool — which asks the order service over HTTP at ``status_url`` — and answers with
what it said. The service's answer changes over time (an order moves on), so a replay that asked it again
would not see what production saw: production records the tool's calls to its cassette topic
(``--cassette-topic``) and the replays are served those answers (the policy's ``replay`` decision).

- ``examples.order_agent.v1:job`` — asks ``order_status(order, service_url)``;
- ``examples.order_agent.v2:job`` — the candidate: asks with ``detail="full"`` as well (other arguments, so
  production's answers do not match it: a gate run names the tool and shows the argument diff).

``status_url`` travels in the input to keep the example self-contained (tests start the service on a free
port); a real tool would take it from its own configuration.
"""
