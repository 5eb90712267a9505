// A TypeScript SDK client application with an elicitation handler: it
// declares form elicitation, answers every elicitation/create with ANSWER
// (accept, decline or cancel), and calls shell.exec with COMMAND once.
//
//   ANSWER=accept COMMAND='touch /tmp/x' node ts-elicit.mjs
//
// The server is MCP_URL (Streamable HTTP) or MCP_STDIO (a JSON array: the
// command and its arguments). The last stdout line is a JSON report: the
// questions asked, and the call's outcome ("ok" or the error code and
// message from the envelope).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const report = { transport: process.env.MCP_URL ? 'http' : 'stdio', asked: [], problems: [] };

function transport() {
  if (process.env.MCP_URL) {
    return new StreamableHTTPClientTransport(new URL(process.env.MCP_URL));
  }
  const [command, ...args] = JSON.parse(process.env.MCP_STDIO);
  return new StdioClientTransport({ command, args, stderr: 'inherit' });
}

const client = new Client({ name: 'mcp-backend-elicit', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  report.asked.push({ mode: req.params.mode ?? '', message: req.params.message, schema: req.params.requestedSchema });
  const action = process.env.ANSWER;
  return action === 'accept' ? { action, content: { approve: true } } : { action };
});

try {
  await client.connect(transport());
  const res = await client.callTool({ name: 'shell.exec', arguments: { command: process.env.COMMAND } });
  if (!res.isError) {
    report.outcome = 'ok';
  } else {
    const env = JSON.parse(res.content.find((c) => c.type === 'text').text).error;
    report.outcome = env.code;
    report.message = env.message;
    report.approvalId = env.approvalId ?? '';
  }
} catch (err) {
  report.problems.push(`${err.name}: ${err.message}`);
} finally {
  await client.close().catch(() => {});
}
console.log(JSON.stringify(report));
process.exit(report.problems.length ? 1 : 0);
