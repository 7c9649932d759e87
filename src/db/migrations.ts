/** The forward-only migration list, embedded into the binary as text imports. */
import m0001 from '../../migrations/0001_init.sql' with { type: 'text' }
import m0002 from '../../migrations/0002_messaging.sql' with { type: 'text' }
import m0003 from '../../migrations/0003_message_counts.sql' with { type: 'text' }
import m0004 from '../../migrations/0004_media.sql' with { type: 'text' }
import m0005 from '../../migrations/0005_groups.sql' with { type: 'text' }
import m0006 from '../../migrations/0006_campaigns.sql' with { type: 'text' }
import m0007 from '../../migrations/0007_connection_status_reason.sql' with { type: 'text' }
import m0008 from '../../migrations/0008_fewer_message_indexes.sql' with { type: 'text' }
import m0009 from '../../migrations/0009_running_campaigns_index.sql' with { type: 'text' }
import m0010 from '../../migrations/0010_dashboard_sessions.sql' with { type: 'text' }
import m0011 from '../../migrations/0011_campaign_paused_reason.sql' with { type: 'text' }
import m0012 from '../../migrations/0012_whatsapp_templates.sql' with { type: 'text' }
import m0013 from '../../migrations/0013_marketing_opt_in.sql' with { type: 'text' }
import m0014 from '../../migrations/0014_campaign_media.sql' with { type: 'text' }
import m0015 from '../../migrations/0015_message_reply_to.sql' with { type: 'text' }
import m0016 from '../../migrations/0016_message_parts.sql' with { type: 'text' }
import m0017 from '../../migrations/0017_network_addresses.sql' with { type: 'text' }
import m0018 from '../../migrations/0018_api_key_last_used.sql' with { type: 'text' }
import m0019 from '../../migrations/0019_campaign_template_refused.sql' with { type: 'text' }
import m0020 from '../../migrations/0020_messages_by_contact.sql' with { type: 'text' }
import m0021 from '../../migrations/0021_webhook_secret_rotation.sql' with { type: 'text' }
import m0022 from '../../migrations/0022_webhook_deliveries_per_endpoint.sql' with { type: 'text' }
import m0023 from '../../migrations/0023_api_key_allowed_ips.sql' with { type: 'text' }
import m0024 from '../../migrations/0024_connection_warmup.sql' with { type: 'text' }
import m0025 from '../../migrations/0025_webhook_endpoint_headers.sql' with { type: 'text' }
import m0026 from '../../migrations/0026_audit_subject.sql' with { type: 'text' }
import m0027 from '../../migrations/0027_media_usage.sql' with { type: 'text' }
import m0028 from '../../migrations/0028_campaign_send_window.sql' with { type: 'text' }
import m0029 from '../../migrations/0029_contact_counts.sql' with { type: 'text' }
import m0030 from '../../migrations/0030_campaign_recipients_order.sql' with { type: 'text' }
import m0031 from '../../migrations/0031_campaign_counts.sql' with { type: 'text' }
import m0032 from '../../migrations/0032_campaign_freeze_in_slices.sql' with { type: 'text' }
import m0033 from '../../migrations/0033_template_imported.sql' with { type: 'text' }
import m0034 from '../../migrations/0034_webhook_delivery_counts.sql' with { type: 'text' }
import m0035 from '../../migrations/0035_suppressions_page.sql' with { type: 'text' }
import m0036 from '../../migrations/0036_media_per_workspace.sql' with { type: 'text' }
import m0037 from '../../migrations/0037_message_outcome_counts.sql' with { type: 'text' }
import m0038 from '../../migrations/0038_cluster.sql' with { type: 'text' }
import m0039 from '../../migrations/0039_service_windows.sql' with { type: 'text' }
import m0040 from '../../migrations/0040_send_path.sql' with { type: 'text' }
import m0041 from '../../migrations/0041_shard_per_session.sql' with { type: 'text' }
import m0042 from '../../migrations/0042_audit_operator.sql' with { type: 'text' }
import m0043 from '../../migrations/0043_media_holds.sql' with { type: 'text' }
import m0044 from '../../migrations/0044_inbound_once.sql' with { type: 'text' }
import m0045 from '../../migrations/0045_resend.sql' with { type: 'text' }
import m0046 from '../../migrations/0046_log_pages.sql' with { type: 'text' }
import m0047 from '../../migrations/0047_status_counts.sql' with { type: 'text' }
import m0048 from '../../migrations/0048_instances.sql' with { type: 'text' }

export const MIGRATIONS: { version: number; name: string; sql: string }[] = [
  { version: 1, name: '0001_init', sql: m0001 },
  { version: 2, name: '0002_messaging', sql: m0002 },
  { version: 3, name: '0003_message_counts', sql: m0003 },
  { version: 4, name: '0004_media', sql: m0004 },
  { version: 5, name: '0005_groups', sql: m0005 },
  { version: 6, name: '0006_campaigns', sql: m0006 },
  { version: 7, name: '0007_connection_status_reason', sql: m0007 },
  { version: 8, name: '0008_fewer_message_indexes', sql: m0008 },
  { version: 9, name: '0009_running_campaigns_index', sql: m0009 },
  { version: 10, name: '0010_dashboard_sessions', sql: m0010 },
  { version: 11, name: '0011_campaign_paused_reason', sql: m0011 },
  { version: 12, name: '0012_whatsapp_templates', sql: m0012 },
  { version: 13, name: '0013_marketing_opt_in', sql: m0013 },
  { version: 14, name: '0014_campaign_media', sql: m0014 },
  { version: 15, name: '0015_message_reply_to', sql: m0015 },
  { version: 16, name: '0016_message_parts', sql: m0016 },
  { version: 17, name: '0017_network_addresses', sql: m0017 },
  { version: 18, name: '0018_api_key_last_used', sql: m0018 },
  { version: 19, name: '0019_campaign_template_refused', sql: m0019 },
  { version: 20, name: '0020_messages_by_contact', sql: m0020 },
  { version: 21, name: '0021_webhook_secret_rotation', sql: m0021 },
  { version: 22, name: '0022_webhook_deliveries_per_endpoint', sql: m0022 },
  { version: 23, name: '0023_api_key_allowed_ips', sql: m0023 },
  { version: 24, name: '0024_connection_warmup', sql: m0024 },
  { version: 25, name: '0025_webhook_endpoint_headers', sql: m0025 },
  { version: 26, name: '0026_audit_subject', sql: m0026 },
  { version: 27, name: '0027_media_usage', sql: m0027 },
  { version: 28, name: '0028_campaign_send_window', sql: m0028 },
  { version: 29, name: '0029_contact_counts', sql: m0029 },
  { version: 30, name: '0030_campaign_recipients_order', sql: m0030 },
  { version: 31, name: '0031_campaign_counts', sql: m0031 },
  { version: 32, name: '0032_campaign_freeze_in_slices', sql: m0032 },
  { version: 33, name: '0033_template_imported', sql: m0033 },
  { version: 34, name: '0034_webhook_delivery_counts', sql: m0034 },
  { version: 35, name: '0035_suppressions_page', sql: m0035 },
  { version: 36, name: '0036_media_per_workspace', sql: m0036 },
  { version: 37, name: '0037_message_outcome_counts', sql: m0037 },
  { version: 38, name: '0038_cluster', sql: m0038 },
  { version: 39, name: '0039_service_windows', sql: m0039 },
  { version: 40, name: '0040_send_path', sql: m0040 },
  { version: 41, name: '0041_shard_per_session', sql: m0041 },
  { version: 42, name: '0042_audit_operator', sql: m0042 },
  { version: 43, name: '0043_media_holds', sql: m0043 },
  { version: 44, name: '0044_inbound_once', sql: m0044 },
  { version: 45, name: '0045_resend', sql: m0045 },
  { version: 46, name: '0046_log_pages', sql: m0046 },
  { version: 47, name: '0047_status_counts', sql: m0047 },
  { version: 48, name: '0048_instances', sql: m0048 },
]
