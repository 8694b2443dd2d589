// Send `count` messages with the Node.js RocketMQ 5 client through rocketha-proxy, then receive
// and ack them with its SimpleConsumer; print one JSON line: what was sent and received.
// Usage: node smoke.js ENDPOINT TOPIC GROUP COUNT
const { Producer, SimpleConsumer } = require('rocketmq-client-nodejs');

async function main() {
  const [endpoint, topic, group, countText] = process.argv.slice(2);
  const count = Number(countText);
  const quiet = { info() {}, warn() {}, error() {}, debug() {} };
  const producer = new Producer({ endpoints: endpoint, namespace: '', topics: [topic],
    logger: quiet });
  await producer.startup();
  const sent = [];
  for (let i = 0; i < count; i++) {
    const receipt = await producer.send({
      topic, tag: 'Node', keys: [`node-${i}`],
      properties: new Map([['origin', 'nodejs']]),
      body: Buffer.from(`n${i}`),
    });
    sent.push(receipt.messageId);
  }
  await producer.shutdown();
  const consumer = new SimpleConsumer({ endpoints: endpoint, namespace: '', consumerGroup: group,
    subscriptions: new Map([[topic, '*']]), awaitDuration: 1000, logger: quiet });
  await consumer.startup();
  const received = [];
  const deadline = Date.now() + 60000;
  while (received.length < count && Date.now() < deadline) {
    for (const message of await consumer.receive(16, 30000)) {
      received.push({ body: message.body.toString(), tag: message.tag, keys: message.keys,
        origin: message.properties.get('origin'), messageId: message.messageId,
        attempt: message.deliveryAttempt });
      await consumer.ack(message);
    }
  }
  await consumer.shutdown();
  console.log(JSON.stringify({ sent, received }));
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
