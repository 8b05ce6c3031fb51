//! Facts about the machine and the command line, printed at the start of a demo.

/// What the demo reports about the machine it ran on.
#[derive(serde::Serialize, Clone, Debug)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub mem_total_bytes: u64,
    pub kernel: String,
}

impl Machine {
    pub fn probe() -> Machine {
        let nproc = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                let k = k.trim();
                (k == "model name" || k == "Model" || k == "cpu model")
                    .then(|| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".to_string());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_total_bytes = meminfo
            .lines()
            .find_map(|l| {
                let rest = l.strip_prefix("MemTotal:")?;
                let kb: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
                Some(kb * 1024)
            })
            .unwrap_or(0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".to_string());
        Machine {
            nproc,
            cpu_model,
            mem_total_bytes,
            kernel,
        }
    }

    pub fn to_line(&self) -> String {
        format!(
            "{} CPUs ({}), {:.1} GiB RAM, Linux {}",
            self.nproc,
            self.cpu_model,
            self.mem_total_bytes as f64 / (1u64 << 30) as f64,
            self.kernel
        )
    }
}

/// Quote an argument for a POSIX shell when it needs it.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// This process's command line, shell-quoted.
pub fn command_line() -> String {
    let mut args: Vec<String> = std::env::args_os()
        .map(|a| shell_quote(&a.to_string_lossy()))
        .collect();
    if let Some(first) = args.first_mut() {
        // Show the program as invoked, shortened to its name.
        if let Some(name) = std::path::Path::new(first.as_str()).file_name() {
            *first = name.to_string_lossy().into_owned();
        }
    }
    args.join(" ")
}
