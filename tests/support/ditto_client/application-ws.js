// A Ditto application on Eclipse Ditto's own JavaScript client speaking Ditto's WebSocket to
// ackstore (tests/doors/test_ditto_client.py). Each step prints one JSON line: what the client
// surfaced — its response's status and body, the error it threw, or a message it was pushed.
const {
  DittoNodeClient, NodeWebSocketBasicAuth, DefaultMatchOptions, DefaultMessagesOptions, Thing,
} = require('@eclipse-ditto/ditto-javascript-client-node');

const [domain, user, password] = process.argv.slice(2);
const builder = () => DittoNodeClient.newWebSocketClient().withoutTls().withDomain(domain)
  .withAuthProvider(NodeWebSocketBasicAuth.newInstance(user, password)).withBuffer(100);
const things = builder().twinChannel().build().getThingsHandle();  // twin commands
const messages = builder().liveChannel().build().getMessagesHandle();  // messages are the live channel's
const thingId = 'org.acme:js-ws-1';

function print(line) {
  console.log(JSON.stringify(line));
}

async function step(name, run) {
  try {
    const answer = await run();
    print({ step: name, status: answer.status, body: answer.body === undefined ? answer : answer.body });
  } catch (error) {
    print({ step: name, error: error instanceof Error ? String(error) : error });
  }
}

(async () => {
  await step('ws-create', () => things.putThing(new Thing(thingId, undefined, { on: true }),
    DefaultMatchOptions.getInstance().addHeader('requested-acks', 'twin-persisted')));
  await step('ws-messages', async () => {
    await messages.requestMessages();
    messages.subscribeToAllMessages((message) => print({
      step: 'ws-pushed', topic: message.topic, path: message.path, value: message.value,
      correlationId: message.headers['correlation-id'],
    }));
    return { status: 'subscribed' };
  });
  await step('ws-message', () => messages.messageToThing(thingId, 'ask', '{"q": 2}', 'application/json',
    DefaultMessagesOptions.getInstance().withTimeout(60)));
})();
