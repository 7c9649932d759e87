/**
 * A module's store, for white-box tests and benchmarks that read or write rows below the
 * services (each service keeps its own store private: other modules go through the service).
 * Made over the same engine as the services, once per Services.
 */
import { CampaignStore } from '../../src/modules/campaigns/store'
import { ContactStore } from '../../src/modules/contacts/store'
import { MessageStore } from '../../src/modules/messages/store'
import { WebhookStore } from '../../src/modules/webhooks/store'
import type { Services } from '../../src/services'

const made = new WeakMap<Services, ReturnType<typeof make>>()
const make = (svc: Services) => {
  const engine = svc.deps.engine
  return { campaigns: new CampaignStore(engine), contacts: new ContactStore(engine), messages: new MessageStore(engine), webhooks: new WebhookStore(engine) }
}

export function storesOf(svc: Services) {
  let s = made.get(svc)
  if (!s) made.set(svc, (s = make(svc)))
  return s
}
