//! [`DecisionServer`]: the MCP server handler over one [`Engine`].

use std::sync::Arc;
use std::time::Instant;

use dgem_backend::Health;
use dgem_cascade::{AfterSetup, Hesitation};
use dgem_core::schema::{SchemaDefaults, ValidSchema};
use dgem_engine::{DecideRequest, Decider};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{json, Value};

use crate::decision::{custom_schema, report};
use crate::error::ToolError;
use crate::tools::{
    check_backend, parse_args, parse_args_strict, tool_list_for, DecideCustomArgs,
    DecidePolicyArgs, NoArgs, DECIDE_CUSTOM, DECIDE_POLICY, HEALTH, LIST_TEMPLATES, LOCAL_BACKEND,
    WARMUP,
};
use dgem_engine::templates::TemplateDir;

/// Implementation name announced in `initialize`.
pub const SERVER_NAME: &str = "dgem-decision-studio-mcp";

/// What `get_health_and_gpu_status` says about GPUs.
pub const NO_GPU_NOTE: &str = "no GPU: dgem mcp runs the embedded model in this process on the CPU (llama.cpp); GPU status does not apply";

/// The MCP server: decision tools over one engine and one policy catalogue
/// (a templates folder, then the built-in policies).
#[derive(Debug, Clone)]
pub struct DecisionServer {
    engine: Arc<dyn Decider>,
    templates: TemplateDir,
    tools: Arc<Vec<Tool>>,
    backends: Arc<Vec<String>>,
    defaults: SchemaDefaults,
    after: Arc<AfterSetup>,
}

impl DecisionServer {
    /// A server deciding with `engine` on the policies of `templates` (its
    /// folder first, then the built-ins; a missing folder is an empty one).
    pub fn new(engine: Arc<dyn Decider>, templates: TemplateDir) -> Self {
        let backends = vec![LOCAL_BACKEND.to_string()];
        Self {
            engine,
            templates,
            tools: Arc::new(tool_list_for(&backends)),
            backends: Arc::new(backends),
            defaults: SchemaDefaults::default(),
            after: Arc::default(),
        }
    }

    /// Use the deployment's Stage-2 provider and calibration file for
    /// `decide_policy`'s cascade and temperature.
    #[must_use]
    pub fn with_after(mut self, after: Arc<AfterSetup>) -> Self {
        self.after = after;
        self
    }

    /// Validate policies under `defaults` (the deployment's `DEFAULT_SAMPLES`,
    /// `DEFAULT_LAYOUT`, `DEFAULT_ISOLATE`) instead of the built-in ones, as the
    /// server's HTTP routes do.
    #[must_use]
    pub fn with_defaults(mut self, defaults: SchemaDefaults) -> Self {
        self.defaults = defaults;
        self
    }

    /// The tools this server offers.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Run tool `name` with `args`; every failure is a [`ToolError`].
    ///
    /// # Errors
    /// [`ToolError`] naming the argument at fault, or the engine failure.
    pub async fn run_tool(
        &self,
        name: &str,
        args: Option<rmcp::model::JsonObject>,
    ) -> Result<CallToolResult, ToolError> {
        match name {
            DECIDE_POLICY => {
                self.decide_policy(parse_args_strict(DECIDE_POLICY, args)?)
                    .await
            }
            DECIDE_CUSTOM => {
                self.decide_custom(parse_args_strict(DECIDE_CUSTOM, args)?)
                    .await
            }
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

    async fn decide_policy(&self, args: DecidePolicyArgs) -> Result<CallToolResult, ToolError> {
        check_backend(DECIDE_POLICY, &args.backend, &self.backends)?;
        let (payload, schema) = self.templates.render_schema(
            &args.template,
            &args.variables,
            &self.defaults,
            args.allow_missing_vars,
        )?;
        let keys = args.after_keys();
        let arguments = |e: dgem_core::SchemaError| ToolError::Arguments {
            tool: DECIDE_POLICY,
            detail: e.message,
        };
        let (raw, injected) =
            dgem_cascade::inject_if_asked(&keys, &payload.schema).map_err(arguments)?;
        let schema = if injected.is_empty() {
            schema
        } else {
            valid_schema(&raw, "template", &self.defaults)?.with_policy(args.template.as_str())
        };
        let hesitation = Hesitation::from_object(&keys, &schema)
            .map_err(arguments)?
            .for_policy(&args.template, injected);
        let state = with_images(DECIDE_POLICY, payload.state, &args.images)?;
        let started = Instant::now();
        let mut decision = self
            .engine
            .decide(DecideRequest {
                schema: schema.clone(),
                state: state.clone(),
                seed: args.seed,
            })
            .await?;
        let finished = self
            .after
            .finish(
                &mut decision,
                &schema,
                &state,
                &dgem_core::images::image_urls(&state),
                &hesitation,
            )
            .await;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let mut r = report(&args.template, &decision, ms);
        if let (Some(extra), Some(m)) = (finished.to_json(), r.structured.as_object_mut()) {
            m.extend(extra);
        }
        if let Some(c) = &finished.cascade {
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
        for sg in finished.suggestions.iter().flatten() {
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

    async fn decide_custom(&self, args: DecideCustomArgs) -> Result<CallToolResult, ToolError> {
        check_backend(DECIDE_CUSTOM, &args.backend, &self.backends)?;
        let raw = custom_schema(&args)?;
        let schema =
            valid_schema(&raw, "questions", &self.defaults)?.with_policy("custom_questions");
        let state = with_images(DECIDE_CUSTOM, args.state, &args.images)?;
        self.decide("custom_questions", schema, state, args.seed)
            .await
    }

    async fn decide(
        &self,
        label: &str,
        schema: ValidSchema,
        state: Value,
        seed: i64,
    ) -> Result<CallToolResult, ToolError> {
        let started = Instant::now();
        let decision = self
            .engine
            .decide(DecideRequest {
                schema,
                state,
                seed,
            })
            .await?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let r = report(label, &decision, ms);
        Ok(result(r.structured, r.text))
    }

    fn list_templates(&self) -> Result<CallToolResult, ToolError> {
        // The catalogue (folder, then built-ins) by name: no server path.
        let list = self.templates.list();
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
        let info = self.engine.info();
        let health = self.engine.health().await;
        let healthy = health == Health::Ready;
        let gpu = GpuFacts::of(&info.engine, &health);
        let state = match &health {
            Health::Ready => "ready".to_string(),
            Health::Starting { phase, .. } => format!("starting ({phase})"),
            Health::Failed { reason, .. } => format!("failed: {reason}"),
        };
        let structured = json!({
            "healthy": healthy,
            "health": health,
            "engine": info.engine,
            "model_id": info.model_id,
            "max_tokens": info.max_tokens,
            "gpu_available": gpu.available,
            "gpu_state": gpu.state,
            "gpu_note": gpu.note,
        });
        let text = format!(
            "Backend {} with model {}: {state}. {}.",
            info.engine, info.model_id, gpu.note
        );
        result(structured, text)
    }

    async fn warmup(&self) -> Result<CallToolResult, ToolError> {
        let raw = json!({"questions": [{"id": "ready", "type": "noul", "instructions": "Is this a warm-up check?"}]});
        let schema = valid_schema(&raw, "warmup", &self.defaults)?;
        let started = Instant::now();
        self.engine
            .decide(DecideRequest {
                schema,
                state: json!("warm-up"),
                seed: 42,
            })
            .await?;
        let ms = started.elapsed().as_secs_f64() * 1e3;
        let info = self.engine.info();
        let gpu = GpuFacts::of(&info.engine, &Health::Ready);
        let structured =
            json!({"status": "warm_and_ready", "elapsed_ms": ms, "gpu_available": gpu.available});
        Ok(result(
            structured,
            format!(
                "Warm and ready: one tiny decision took {ms:.0} ms on {} ({}).",
                info.engine, gpu.note
            ),
        ))
    }
}

/// What the health tool can say about a GPU, by backend engine.
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
    fn of(engine: &str, health: &Health) -> Self {
        match engine {
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
                    "the model runs behind the `{engine}` backend, outside this process; its GPU is not visible from here"
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
                return Err(ErrorData::invalid_params(e.to_string(), None));
            }
            Err(e) => {
                tracing::info!(tool = %request.name, error = %e, "tool error");
                CallToolResult::error(vec![ContentBlock::text(e.to_string())])
            }
        };
        Ok(out.into())
    }
}

/// `state` with the tool's `images` ahead of its text, each checked.
fn with_images(tool: &'static str, state: Value, images: &[String]) -> Result<Value, ToolError> {
    let arguments = |e: dgem_core::SchemaError| ToolError::Arguments {
        tool,
        detail: e.message,
    };
    let list = Value::Array(images.iter().cloned().map(Value::String).collect());
    let parts = dgem_core::images::parts_from_json(Some(&list)).map_err(arguments)?;
    dgem_core::images::with_images(state, parts).map_err(arguments)
}

#[cfg(test)]
mod gpu_tests {
    use super::*;

    /// Regression: on `dgem serve --backend vllm=…` and on the gateway the
    /// health tool said the embedded CPU model ran in this process.
    #[test]
    fn health_tool_names_the_engine_it_runs_on() {
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
