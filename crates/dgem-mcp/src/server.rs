//! [`DecisionServer`]: the MCP server handler over one [`Engine`].

use std::sync::Arc;
use std::time::Instant;

use dgem_backend::Health;
use dgem_cascade::AfterSetup;
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{DecideRequest, Decider};
use dgem_service::{Catalogue, Service};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{json, Value};

use crate::decision::report;
use crate::error::ToolError;
use crate::tools::{
    check_backend, parse_args, parse_request, tool_list_for, NoArgs, DECIDE_CUSTOM, DECIDE_POLICY,
    HEALTH, LIST_TEMPLATES, LOCAL_BACKEND, WARMUP,
};
use dgem_engine::templates::TemplateDir;

/// Implementation name announced in `initialize`.
pub const SERVER_NAME: &str = "dgem-decision-studio-mcp";

/// What `get_health_and_gpu_status` says about GPUs.
pub const NO_GPU_NOTE: &str = "no GPU: dgem mcp runs the embedded model in this process on the CPU (llama.cpp); GPU status does not apply";

/// The MCP server: decision tools over one decider and the decision service
/// (one policy catalogue: a templates folder, then the built-in policies).
#[derive(Debug, Clone)]
pub struct DecisionServer {
    decider: Arc<dyn Decider>,
    service: Service,
    tools: Arc<Vec<Tool>>,
    backends: Arc<Vec<String>>,
}

impl DecisionServer {
    /// A server deciding with `decider` on the policies of `templates` (its
    /// folder first, then the built-ins; a missing folder is an empty one).
    pub fn new(decider: Arc<dyn Decider>, templates: TemplateDir) -> Self {
        Self::from_service(decider, Service::new(Catalogue::new(templates)))
    }

    /// A server deciding with `decider` through the deployment's decision
    /// `service` (its catalogue, schema defaults and post-read setup: the one
    /// `/api/decide` uses too).
    pub fn from_service(decider: Arc<dyn Decider>, service: Service) -> Self {
        let backends = vec![LOCAL_BACKEND.to_string()];
        Self {
            decider,
            service,
            tools: Arc::new(tool_list_for(&backends)),
            backends: Arc::new(backends),
        }
    }

    /// Use the deployment's Stage-2 provider and calibration file for the
    /// decision tools' cascade and temperature.
    #[must_use]
    pub fn with_after(mut self, after: Arc<AfterSetup>) -> Self {
        self.service = self.service.with_after(after);
        self
    }

    /// Validate policies under `defaults` (the deployment's `DEFAULT_SAMPLES`,
    /// `DEFAULT_LAYOUT`, `DEFAULT_ISOLATE`) instead of the built-in ones, as the
    /// server's HTTP routes do.
    #[must_use]
    pub fn with_defaults(mut self, defaults: SchemaDefaults) -> Self {
        self.service = self.service.with_defaults(defaults);
        self
    }

    /// The tools this server offers.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Run tool `name` with `args`; every failure is a [`ToolError`].
    ///
    /// # Errors
    /// [`ToolError`] naming the argument at fault, or the decider's failure.
    pub async fn run_tool(
        &self,
        name: &str,
        args: Option<rmcp::model::JsonObject>,
    ) -> Result<CallToolResult, ToolError> {
        match name {
            DECIDE_POLICY => self.decide_tool(DECIDE_POLICY, args).await,
            DECIDE_CUSTOM => self.decide_tool(DECIDE_CUSTOM, args).await,
            LIST_TEMPLATES => {
                let _: NoArgs = parse_args(LIST_TEMPLATES, args)?;
                self.list_templates()
            }
            HEALTH => {
                let _: NoArgs = parse_args(HEALTH, args)?;
                Ok(self.health().await)
            }
            WARMUP => {
                let _: NoArgs = parse_args(WARMUP, args)?;
                self.warmup().await
            }
            other => Err(ToolError::UnknownTool(other.to_string())),
        }
    }

    /// A decision tool: the arguments read as the service's one request,
    /// prepared, decided and post-read by the decision service.
    async fn decide_tool(
        &self,
        tool: &'static str,
        args: Option<rmcp::model::JsonObject>,
    ) -> Result<CallToolResult, ToolError> {
        let req = parse_request(tool, args)?;
        check_backend(tool, req.backend.as_deref().unwrap_or(""), &self.backends)?;
        let prepared = self
            .service
            .prepare(None, req)
            .map_err(|e| ToolError::from_service(tool, e))?;
        let decided = self.service.decide(self.decider.as_ref(), prepared).await?;
        let mut r = report(&decided.label, &decided.decision, decided.elapsed_ms);
        if let Some(m) = r.structured.as_object_mut() {
            m.extend(decided.extra());
        }
        if let Some(c) = &decided.after.cascade {
            r.text.push_str(&format!(
                "\nCascade ({}): escalated {} of {} answers{}{}",
                c.mode.as_str(),
                c.escalated_count,
                c.total_slots,
                if c.model.is_empty() {
                    String::new()
                } else {
                    format!(" to {}", c.model)
                },
                if c.error.is_empty() {
                    String::new()
                } else {
                    format!("; error: {}", c.error)
                }
            ));
        }
        for sg in decided.after.suggestions.iter().flatten() {
            r.text.push_str(&format!(
                "\nSuggested new option for `{}` ({}): {} — {}",
                sg.question_id,
                sg.trigger_reason,
                sg.suggested_option.name,
                sg.suggested_option.description
            ));
        }
        Ok(result(r.structured, r.text))
    }

    fn list_templates(&self) -> Result<CallToolResult, ToolError> {
        // The catalogue (folder, then built-ins) by name: no server path.
        let list = self.service.catalogue().list();
        let mut text = format!("{} policy templates:\n", list.len());
        for t in &list {
            let qs: Vec<String> = t
                .questions
                .iter()
                .map(|q| format!("{} ({})", q.id, q.kind))
                .collect();
            text.push_str(&format!(
                "- {}: questions [{}]; variables [{}]{}\n",
                t.name,
                qs.join(", "),
                t.variables.join(", "),
                if t.error.is_empty() {
                    String::new()
                } else {
                    format!("; note: {}", t.error)
                }
            ));
        }
        let structured = json!({"count": list.len(), "templates": list});
        Ok(result(structured, text))
    }

    async fn health(&self) -> CallToolResult {
        let info = self.decider.info();
        let health = self.decider.health().await;
        let healthy = health == Health::Ready;
        let gpu = GpuFacts::of(&info.runtime, &health);
        let state = match &health {
            Health::Ready => "ready".to_string(),
            Health::Starting { phase, .. } => format!("starting ({phase})"),
            Health::Failed { reason, .. } => format!("failed: {reason}"),
        };
        let structured = json!({
            "healthy": healthy,
            "health": health,
            "engine": info.runtime,
            "model_id": info.model_id,
            "max_tokens": info.max_tokens,
            "gpu_available": gpu.available,
            "gpu_state": gpu.state,
            "gpu_note": gpu.note,
        });
        let text = format!(
            "Backend {} with model {}: {state}. {}.",
            info.runtime, info.model_id, gpu.note
        );
        result(structured, text)
    }

    async fn warmup(&self) -> Result<CallToolResult, ToolError> {
        let raw = json!({"questions": [{"id": "ready", "type": "noul", "instructions": "Is this a warm-up check?"}]});
        let schema = valid_schema(&raw, "warmup", self.service.defaults())?;
        let started = Instant::now();
        self.decider
            .decide(DecideRequest {
                schema,
                state: json!("warm-up"),
                seed: 42,
            })
            .await?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let info = self.decider.info();
        let gpu = GpuFacts::of(&info.runtime, &Health::Ready);
        let structured =
            json!({"status": "warm_and_ready", "elapsed_ms": ms, "gpu_available": gpu.available});
        Ok(result(
            structured,
            format!(
                "Warm and ready: one tiny decision took {ms:.0} ms on {} ({}).",
                info.runtime, gpu.note
            ),
        ))
    }
}

/// What the health tool can say about a GPU, by the runtime behind the backend.
#[derive(Debug, PartialEq)]
struct GpuFacts {
    /// `false` for a model in this process on the CPU, `true`/`false` for vLLM
    /// by its health, `null` when the GPU is behind another server (gateway).
    available: Value,
    /// `none`, `warm_and_ready`, `warming_up`, `unavailable` or `unknown`.
    state: &'static str,
    /// One plain sentence.
    note: String,
}

impl GpuFacts {
    fn of(runtime: &str, health: &Health) -> Self {
        match runtime {
            // vLLM serving DiffusionGemma runs on a GPU by construction.
            "vllm" => {
                let state = match health {
                    Health::Ready => "warm_and_ready",
                    Health::Starting { .. } => "warming_up",
                    Health::Failed { .. } => "unavailable",
                };
                Self {
                    available: json!(*health == Health::Ready),
                    state,
                    note: format!(
                        "the model is DiffusionGemma on vLLM (GPU), {state}; its own /health has the details"
                    ),
                }
            }
            // Decisions routed to other servers: their GPUs are theirs.
            "dgem-gateway" | "remote" => Self {
                available: Value::Null,
                state: "unknown",
                note: format!(
                    "the model runs behind the `{runtime}` backend, outside this process; its GPU is not visible from here"
                ),
            },
            // In this process on the CPU: llama.cpp (or a scripted test backend).
            _ => Self {
                available: json!(false),
                state: "none",
                note: NO_GPU_NOTE.to_owned(),
            },
        }
    }
}

fn valid_schema(
    raw: &Value,
    field: &'static str,
    defaults: &SchemaDefaults,
) -> Result<ValidSchema, ToolError> {
    ValidSchema::from_value(raw, defaults).map_err(|e| ToolError::Schema {
        field,
        detail: e.to_string(),
    })
}

fn result(structured: Value, text: String) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(structured);
    r
}

impl ServerHandler for DecisionServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "dgem reads a probability for every allowed answer of every question. \
                 Call list_policy_templates, then decide_policy; or decide_custom_questions for \
                 ad-hoc questions. Hesitation is the normalized entropy (0 certain, 1 coin flip).",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let out = match self.run_tool(&request.name, request.arguments).await {
            Ok(r) => r,
            // An unknown tool is a protocol error (MCP spec, "Error Handling":
            // -32602); everything else is a tool result with `isError`, whose
            // text names the argument to fix so a model can correct its call.
            Err(e @ ToolError::UnknownTool(_)) => {
                tracing::info!(tool = %request.name, "unknown tool");
                let text = dgem_core::json::bounded_message(&e.to_string());
                return Err(ErrorData::invalid_params(text, None));
            }
            Err(e) => {
                tracing::info!(tool = %request.name, error = %e, "tool error");
                // Bounded: a check may quote a huge argument whole.
                let text = dgem_core::json::bounded_message(&e.to_string());
                CallToolResult::error(vec![ContentBlock::text(text)])
            }
        };
        Ok(out.into())
    }
}

/// `state` with the tool's `images` ahead of its text, each checked.
#[cfg(test)]
mod gpu_tests {
    use super::*;

    /// Regression: on `dgem serve --backend vllm=…` and on the gateway the
    /// health tool said the embedded CPU model ran in this process.
    #[test]
    fn health_tool_names_the_runtime_it_runs_on() {
        let cpu = GpuFacts::of("llama.cpp", &Health::Ready);
        assert_eq!(cpu.available, json!(false));
        assert_eq!(cpu.note, NO_GPU_NOTE);
        let vllm = GpuFacts::of("vllm", &Health::starting("waiting_for_vllm"));
        assert_eq!(vllm.available, json!(false));
        assert_eq!(vllm.state, "warming_up");
        assert!(!vllm.note.contains("embedded"), "{}", vllm.note);
        assert_eq!(GpuFacts::of("vllm", &Health::Ready).available, json!(true));
        let remote = GpuFacts::of("dgem-gateway", &Health::Ready);
        assert_eq!(remote.available, Value::Null);
        assert!(remote.note.contains("dgem-gateway"), "{}", remote.note);
        assert!(!remote.note.contains("CPU"), "{}", remote.note);
    }
}
