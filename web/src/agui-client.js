// The stock AG-UI client, as an application bundles it: the browser tests drive it.
import { HttpAgent } from "@ag-ui/client";

window.HttpAgent = HttpAgent;
