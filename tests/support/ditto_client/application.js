// A Ditto application written against Eclipse Ditto's own JavaScript client, pointed at ackstore's
// HTTP API (tests/doors/test_ditto_client.py). Each step prints one JSON line: what the client
// surfaced — its response's status and body, or the error it threw.
const {
  DittoNodeClient, NodeHttpBasicAuth, DefaultMatchOptions, DefaultSearchOptions, DefaultMessagesOptions, Thing,
} = require('@eclipse-ditto/ditto-javascript-client-node');

const [domain, user, password] = process.argv.slice(2);
const client = DittoNodeClient.newHttpClient().withoutTls().withDomain(domain)
  .withAuthProvider(NodeHttpBasicAuth.newInstance(user, password)).build();
const things = client.getThingsHandle();
const thingId = 'org.acme:js-1';

async function step(name, run) {
  try {
    const answer = await run();
    console.log(JSON.stringify({ step: name, status: answer.status, body: answer.body === undefined ? answer : answer.body }));
  } catch (error) {
    console.log(JSON.stringify({ step: name, error: error instanceof Error ? String(error) : error }));
  }
}

(async () => {
  await step('create', () => things.putThing(new Thing(thingId, undefined, { on: true })));
  await step('modify', () => things.putAttribute(thingId, 'on', false,
    DefaultMatchOptions.getInstance().addHeader('requested-acks', 'twin-persisted')));
  await step('read', async () => ({ status: 200, body: await things.getThing(thingId) }));
  await step('search', async () => ({
    status: 200,
    body: await client.getSearchHandle().search(DefaultSearchOptions.getInstance().withFilter('eq(attributes/on,false)')),
  }));
  await step('message', () => client.getMessagesHandle().messageToThing(thingId, 'ask', '{"q": 1}', 'application/json',
    DefaultMessagesOptions.getInstance().withTimeout(60)));
  await step('not-found', async () => ({ status: 200, body: await things.getThing('org.acme:never') }));
})();
